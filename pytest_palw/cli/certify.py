"""`palw certify`: run the conformance suite against a runtime and write the certificate."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import sys
import types
from pathlib import Path

from pytest_palw.certificate import discard, page_path
from pytest_palw.errors import CacheError, PalwError
from pytest_palw.paths import CONFORMANCE_DIR, PACKAGE_DIR

# The plugins a certification runs with, and no others: a plugin the host happens to have (a
# reordering or reseeding one, a retrying one, a coverage tracer) would change what is certified,
# and each one is imported again in every xdist worker. A plugin loaded anyway (`palw certify -- -p
# NAME`) is a verdict reason, named with its file's sha256 (foreign_plugins).
SUITE_PLUGINS = ("pytest_palw.plugin", "xdist.plugin", "syrupy")
# pytest's environment variables that add options or plugins to every pytest of the run (workers too)
REFUSED_ENVIRONMENT = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certify", help="run the conformance suite and write a certificate",
        description="Runs conformance/ with pytest. Without options: this host's cached runtime "
                    "(built on first use), the synthetic tiny model, certificate in ./palw-certificate.json "
                    "and its HTML report beside it.")
    parser.add_argument("--model", help="GGUF path or profile:tiny|gpu|full (pytest --palw-model)")
    parser.add_argument("--lib", help="a `palw build` output, or a directory of PALW-patched libraries from any "
                                      "build or its libllama.so (pytest --palw-lib)")
    parser.add_argument("--tools", metavar="DIR", help="the seed tools' directory (pytest --palw-tools; default: "
                                                       "the build's, or beside the libraries: DIR, then DIR/../bin)")
    parser.add_argument("--runtime-headers", metavar="DIR",
                        help="a brought runtime's runtime-palw/cuda headers: the producer fault cases compile "
                             "against its device hook (pytest --palw-runtime-headers)")
    parser.add_argument("--hook-sha256", metavar="HEX",
                        help="a brought runtime's palw_cuda_producer_trace.cuh digest: the suite's copy stands in "
                             "only when equal (pytest --palw-hook-sha256)")
    parser.add_argument("--source", metavar="FILE",
                        help="for a brought runtime on a machine without network: the sdist or a `palw source` "
                             "archive the suite's ABI copy is made from (pytest --palw-source)")
    parser.add_argument("--certificate", default="palw-certificate.json", help="where to write it")
    parser.add_argument("-n", "--workers", help="pytest-xdist workers (e.g. 4 or auto)")
    parser.add_argument("--require-certified", action="store_true",
                        help="exit 1 unless the verdict is certified (CI gates)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    parser.set_defaults(func=run)


def run(args) -> int:
    certificate = Path(args.certificate)
    discard(certificate.resolve())  # before pytest: its plugin may never start (a -p that fails to import)
    for variable in REFUSED_ENVIRONMENT:
        if os.environ.get(variable, "").strip():
            raise PalwError(f"{variable} is set ({os.environ[variable]!r}): `palw certify` runs the suite alone, "
                            "without options or plugins from the environment; unset it (pytest arguments go "
                            "after `--`)")
    # The suite alone: no ini file (the suite's conftest sets what it needs), the rootdir the suite's
    # parent (case ids conformance/test_*.py::... from any directory), no conftest above the suite.
    argv = [str(CONFORMANCE_DIR), f"--palw-certificate={args.certificate}", "-q", "-c", os.devnull,
            f"--rootdir={CONFORMANCE_DIR.parent}", f"--confcutdir={CONFORMANCE_DIR}"]
    for plugin in SUITE_PLUGINS:
        argv += ["-p", plugin]
    if CONFORMANCE_DIR.parent == PACKAGE_DIR:
        # The installed suite (site-packages/pytest_palw/conformance): pytest's cache here, not in site-packages.
        if not any("no:cacheprovider" in arg for arg in args.pytest_args):
            argv += ["-o", f"cache_dir={Path.cwd() / '.pytest_cache'}"]
    if args.model:
        argv.append(f"--palw-model={args.model}")
    if args.lib:
        argv.append(f"--palw-lib={args.lib}")
    if args.tools:
        argv.append(f"--palw-tools={args.tools}")
    if args.runtime_headers:
        argv.append(f"--palw-runtime-headers={args.runtime_headers}")
    if args.hook_sha256:
        argv.append(f"--palw-hook-sha256={args.hook_sha256}")
    if args.source:
        argv.append(f"--palw-source={args.source}")
    if args.workers:
        # worksteal: an idle worker takes queued cases from a busy one (case costs differ 1000x)
        argv += ["-n", str(args.workers), "--dist", "worksteal"]
    certificate = Path(args.certificate)
    with certificate_lock(certificate.resolve()):
        return _certify(args, argv, certificate)


def _certify(args, argv: list[str], certificate: Path) -> int:
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
    problems = written_problems(certificate, document)
    if problems:
        discard(certificate)
        print(f"palw: the certificate written to {certificate} does not check ({problems[0]}): it is removed, "
              "nothing is certified")
        return code or 1
    verdict = document["verdict"]
    page = page_path(certificate)
    print(f"palw: certificate {certificate}: {'CERTIFIED' if verdict['certified'] else 'not certified'} "
          f"({verdict['passed']} of {verdict['expected']} expected cases passed"
          + (f"; report: {page})" if page.is_file() else "; no report page)"))
    if args.require_certified and not verdict["certified"]:
        return code or 1
    return code


def written_problems(certificate: Path, document: dict) -> list[str]:
    """The guard outside pytest (it runs even when a plugin kept the plugin's hooks from running):
    the file must be the run's document, agree with itself and be of this installed suite
    (certificate/consistency.py, as `palw verify`)."""
    import json

    from pytest_palw.certificate import load
    from pytest_palw.certificate.consistency import inconsistencies
    from pytest_palw.certificate.inventory import suite_digest

    written = load(certificate)
    problems = inconsistencies(written, suite_digest())
    if written != json.loads(json.dumps(document)):
        problems.append("the file is not the document the run judged: something rewrote it after the run")
    return problems


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

    def pytest_collection_finish(self, session):
        """This process ends with the run: what collection made lives to its end anyway. Out of the
        cyclic collector's sight, 3 075 cases' objects are not walked again by each full collection
        (pytest's own at unconfigure: 0.25 s)."""
        gc.freeze()

    def pytest_sessionfinish(self, session):
        """Before the controller judges (its sessionfinish is trylast): a plugin outside the suite's.
        First, what the cases left: one full collection (a failing __del__ in the run's garbage
        reaches pytest's unraisable hook, as in plain pytest), then the survivors, which live to
        this process's end, out of the collector's sight: pytest's two collections at unconfigure
        and the interpreter's at exit do not walk them again (0.55 s of the CPU main job)."""
        gc.collect()
        gc.freeze()
        foreign = foreign_plugins(self.config.pluginmanager)
        if foreign and self.controller is not None:
            self.controller.certificate.run.other.append(
                f"{len(foreign)} plugin(s) other than pytest's, xdist's, syrupy's and the suite's ran: "
                f"{'; '.join(foreign)}: `palw certify` runs the suite alone; remove them (-p) to certify")

    @property
    def controller(self):
        return self.config.pluginmanager.get_plugin("palw-controller") if self.config is not None else None

    @property
    def document(self) -> dict | None:
        return self.controller.certificate.document if self.controller is not None else None


def foreign_plugins(pluginmanager) -> list[str]:
    """Each registered plugin whose code (a module's file; a class's, or an object's class's, module's
    file) lies outside pytest, xdist, syrupy, the plugin and the suite: "module (file, sha256 ...)"."""
    from pytest_palw.cache import sha256_file
    from pytest_palw.paths import resolved
    from pytest_palw.session import trusted_roots, within

    roots = trusted_roots()
    found = {}
    for _, plugin in pluginmanager.list_name_plugin():
        if plugin is None:  # blocked (-p no:NAME)
            continue
        # A module, a class (pytest 9.1 registers LegacyTmpdirPlugin so) or an instance: the code's module.
        defined_in = plugin.__module__ if isinstance(plugin, type) else type(plugin).__module__
        module = plugin if isinstance(plugin, types.ModuleType) else sys.modules.get(defined_in)
        name = getattr(module, "__name__", None) or defined_in
        source = getattr(module, "__file__", None)
        # A class's __module__ is a name anyone can set: its hooks' code says where it was compiled.
        outside = [path for path in _code_files(plugin) if not within(resolved(path), roots)]
        if outside:
            source = outside[0]
        elif source is not None and within(resolved(source), roots):
            continue
        digest = sha256_file(Path(source)) if source and Path(source).is_file() else "unknown"
        found[name] = f"{name} ({source}, sha256 {digest})"
    return [found[name] for name in sorted(found)]


def _code_files(plugin) -> list[str]:
    """The files the hook functions (pytest_*) of a class plugin, or of an object plugin's class, were
    compiled from: the code pytest calls."""
    if isinstance(plugin, types.ModuleType):
        return []
    cls = plugin if isinstance(plugin, type) else type(plugin)
    files = []
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if not name.startswith("pytest_"):
                continue
            code = getattr(getattr(value, "__func__", value), "__code__", None)
            if code is not None and code.co_filename not in files:
                files.append(code.co_filename)
    return files


def run_without_autoload(argv: list[str], plugins=()) -> int:
    """pytest.main with only the plugins ``argv`` names (-p), here and in the xdist workers (they
    inherit the environment)."""
    import os
    from unittest import mock

    import pytest

    with mock.patch.dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"):
        return pytest.main(argv, plugins=list(plugins))
