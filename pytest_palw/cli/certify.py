"""`palw certify`: run the conformance suite against a runtime and write the certificate."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from pytest_palw.certificate import discard, page_path
from pytest_palw.errors import CacheError, PalwError
from pytest_palw.paths import CONFORMANCE_DIR, PACKAGE_DIR

# The plugins a certification runs with, and no others: a plugin the host happens to have (a
# reordering or reseeding one, a coverage tracer) would change what is certified, and each one is
# imported again in every xdist worker. `palw certify -- -p NAME` adds one on purpose.
SUITE_PLUGINS = ("pytest_palw.plugin", "xdist.plugin", "syrupy")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certify", help="run the conformance suite and write a certificate",
        description="Runs conformance/ with pytest. Without options: this host's cached runtime "
                    "(built on first use), the synthetic tiny model, certificate in ./palw-certificate.json "
                    "and its HTML report beside it.")
    parser.add_argument("--model", help="GGUF path or profile:tiny|gpu|full (pytest --palw-model)")
    parser.add_argument("--lib", help="a `palw build` output (pytest --palw-lib)")
    parser.add_argument("--certificate", default="palw-certificate.json", help="where to write it")
    parser.add_argument("-n", "--workers", help="pytest-xdist workers (e.g. 4 or auto)")
    parser.add_argument("--require-certified", action="store_true",
                        help="exit 1 unless the verdict is certified (CI gates)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    parser.set_defaults(func=run)


def run(args) -> int:
    argv = [str(CONFORMANCE_DIR), f"--palw-certificate={args.certificate}", "-q"]
    for plugin in SUITE_PLUGINS:
        argv += ["-p", plugin]
    if CONFORMANCE_DIR.parent == PACKAGE_DIR:
        # The installed suite (site-packages/pytest_palw/conformance): case ids as a checkout's
        # (conformance/test_*.py::...) from any directory; pytest's cache here, not in site-packages.
        argv.append(f"--rootdir={PACKAGE_DIR}")
        if not any("no:cacheprovider" in arg for arg in args.pytest_args):
            argv += ["-o", f"cache_dir={Path.cwd() / '.pytest_cache'}"]
    if args.model:
        argv.append(f"--palw-model={args.model}")
    if args.lib:
        argv.append(f"--palw-lib={args.lib}")
    if args.workers:
        # worksteal: an idle worker takes queued cases from a busy one (case costs differ 1000x)
        argv += ["-n", str(args.workers), "--dist", "worksteal"]
    certificate = Path(args.certificate)
    with certificate_lock(certificate.resolve()):
        return _certify(args, argv, certificate)


def _certify(args, argv: list[str], certificate: Path) -> int:
    discard(certificate.resolve())  # before pytest: its plugin may never start (a -p that fails to import)
    received = _Controller()
    try:
        code = int(run_without_autoload(argv + list(args.pytest_args), plugins=[received]))
    except Exception as error:  # pytest itself failed after the session (e.g. -W error at shutdown)
        print(f"palw: pytest raised {type(error).__name__}: {str(error)[:300]}")
        code = 1
    document = received.document
    written = received.controller.path if received.controller is not None else None
    if written is not None and written != certificate.resolve():
        discard(written)
        print(f"palw: the run wrote its certificate to {written}, not {certificate} (a --palw-certificate among "
              "the pytest arguments): nothing is certified; pass the path with --certificate only")
        return code or 1
    if document is None or not certificate.is_file():
        why = "the session ended before its verdict" if document is None else "it could not be written"
        print(f"palw: no certificate written to {certificate}: {why} (see above), so nothing is certified")
        return code or 1
    verdict = document["verdict"]
    page = page_path(certificate)
    print(f"palw: certificate {certificate}: {'CERTIFIED' if verdict['certified'] else 'not certified'} "
          f"({verdict['passed']} of {verdict['expected']} expected cases passed"
          + (f"; report: {page})" if page.is_file() else "; no report page)"))
    if args.require_certified and not verdict["certified"]:
        return code or 1
    return code


@contextlib.contextmanager
def certificate_lock(certificate: Path):
    """One `palw certify` at a time per certificate path: a second one refuses in one line (two runs
    writing one file would each announce it, and it would hold one run's verdict)."""
    from pytest_palw.cache import key_of
    from pytest_palw.paths import cache_dir

    path = cache_dir("locks") / f"certificate-{key_of(str(certificate))}.lock"
    try:
        handle = open(path, "a+")
    except OSError as error:
        raise CacheError(f"cannot create the lock {path} ({error.strerror})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise PalwError(f"another `palw certify` (pid {holder}) is writing {certificate}: wait for it to "
                            "finish, or pass another --certificate path") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Controller:
    """Holds on to the session's controller: its document, as finally judged (no file read back)."""

    config = None

    def pytest_configure(self, config):
        self.config = config

    @property
    def controller(self):
        return self.config.pluginmanager.get_plugin("palw-controller") if self.config is not None else None

    @property
    def document(self) -> dict | None:
        return self.controller.certificate.document if self.controller is not None else None


def run_without_autoload(argv: list[str], plugins=()) -> int:
    """pytest.main with only the plugins ``argv`` names (-p), here and in the xdist workers (they
    inherit the environment)."""
    import os
    from unittest import mock

    import pytest

    with mock.patch.dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"):
        return pytest.main(argv, plugins=list(plugins))
