"""`palw certify` runs the suite alone: the suite's own (empty) ini and rootdir, no conftest above
the suite, only pytest's, xdist's, syrupy's and the plugin's modules; a foreign plugin loaded anyway
is a refusal reason with its name and sha256.

The toy suite of test_verdict_routes.py in a vendor's directory: a pyproject.toml whose addopts
force flaky on every case, and a conftest.py in the directory above the suite. The stub is imported
before `palw certify` starts pytest (never loaded as a plugin: it would be a foreign one).
"""

from __future__ import annotations

import hashlib
import json
import sys

import flaky.flaky_pytest_plugin
import pytest
from test_verdict_routes import TOY_CASES, toy  # noqa: F401 (toy: a fixture)

VENDOR_PYPROJECT = '[tool.pytest.ini_options]\naddopts = "-p flaky --force-flaky --max-runs=3"\n'
VENDOR_CONFTEST = '''
from pathlib import Path

Path(__file__).with_name("conftest-ran").write_text("the vendor conftest ran")
'''


def certify(pytester, *pytest_args):
    """`palw certify` on the toy suite from the vendor's directory: (document, result)."""
    certificate = pytester.path / "certified.json"
    run = ("import sys, palw_toy_stub\nfrom pytest_palw.cli import main\n"
           f"sys.exit(main(['certify', '--certificate', {str(certificate)!r}, '--', *{list(pytest_args)!r}]))")
    result = pytester.run(sys.executable, "-c", run, timeout=300)
    assert certificate.is_file(), result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
    return json.loads(certificate.read_text()), result


def vendor_directory(pytester):
    (pytester.path / "tox.ini").unlink()
    (pytester.path / "pyproject.toml").write_text(VENDOR_PYPROJECT)
    (pytester.path / "conftest.py").write_text(VENDOR_CONFTEST)


def test_a_vendors_ini_and_conftest_do_not_apply_the_honest_run_is_certified(toy, pytester):
    toy()  # the toy directory (and the control: a plain run of it is certified)
    vendor_directory(pytester)
    document, result = certify(pytester)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert document["verdict"]["certified"] is True, document["verdict"]["reasons"]
    assert document["verdict"]["passed"] == TOY_CASES
    assert not (pytester.path / "conftest-ran").exists()
    assert not any(plugin.startswith("flaky ") for plugin in document["pytest"]["plugins"])


def test_flaky_loaded_anyway_is_refused_with_its_name_and_sha256_never_a_flaky_pass(toy, pytester, monkeypatch):
    toy()
    vendor_directory(pytester)
    monkeypatch.setenv("TOY_FAIL_ONCE", "test_index[2]")
    document, result = certify(pytester, "-p", "flaky", "--force-flaky", "--max-runs=3")
    assert result.ret == 0  # flaky made pytest see a pass
    reasons = " | ".join(document["verdict"]["reasons"])
    assert document["verdict"]["certified"] is False
    source = flaky.flaky_pytest_plugin.__file__
    sha256 = hashlib.sha256(open(source, "rb").read()).hexdigest()
    assert f"flaky.flaky_pytest_plugin ({source}, sha256 {sha256})" in reasons, reasons
    assert ("1 case(s) whose body was entered more than once or raised in its call (first: "
            "conformance/test_claims.py::test_index[2] (entered 2 times") in reasons, reasons
    assert not (pytester.path / "conftest-ran").exists()


def test_a_run_that_fails_once_without_flaky_fails(toy, pytester, monkeypatch):
    """The vendor's addopts (-p flaky --force-flaky) do not apply: the first failure stands."""
    toy()
    vendor_directory(pytester)
    monkeypatch.setenv("TOY_FAIL_ONCE", "test_index[2]")
    document, result = certify(pytester)
    assert result.ret == 1
    assert "1 case(s) failed (first: conformance/test_claims.py::test_index[2])" in document["verdict"]["reasons"]


FORGE = '''
import json
from pathlib import Path

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_cmdline_main(config):
    status = yield  # the plugin has judged and written the certificate
    path = Path(config.getoption("palw_certificate"))
    document = json.loads(path.read_text())
    document["verdict"].update(certified=True, reasons=[])
    path.write_text(json.dumps(document))
    return status
'''


def test_a_certificate_rewritten_after_the_run_is_removed(toy, pytester):
    """The guard outside pytest: the file must be the run's document and agree with itself."""
    toy()
    (pytester.path / "toy_forge.py").write_text(FORGE)
    certificate = pytester.path / "certified.json"
    run = ("import sys, palw_toy_stub\nfrom pytest_palw.cli import main\n"
           f"sys.exit(main(['certify', '--certificate', {str(certificate)!r}, '--', '-p', 'toy_forge']))")
    result = pytester.run(sys.executable, "-c", run, timeout=300)
    assert result.ret == 1
    assert (f"palw: the certificate written to {certificate} does not check (the file is not the document the run "
            "judged: something rewrote it after the run): it is removed, nothing is certified") in result.stdout.str()
    assert not certificate.exists() and not certificate.with_suffix(".html").exists()


FOREIGN_CLASS_PLUGIN = """class VendorPlugin:
    def pytest_runtest_call(self, item):
        pass


class Disguised(VendorPlugin):
    __module__ = "_pytest.legacypath"
"""


def test_a_plugin_registered_as_a_class_is_judged_by_its_own_module(tmp_path, monkeypatch):
    """pytest 9.1 registers its `LegacyTmpdirPlugin` as a class, not an instance: a class is judged by
    the module that defines it (type(cls) is `builtins.type`, which has no file and is no plugin)."""
    from _pytest.legacypath import LegacyTmpdirPlugin

    from pytest_palw.cli.certify import foreign_plugins

    (tmp_path / "vendor_class_plugin.py").write_text(FOREIGN_CLASS_PLUGIN)
    monkeypatch.syspath_prepend(tmp_path)
    import vendor_class_plugin

    manager = pytest.PytestPluginManager()
    manager.register(LegacyTmpdirPlugin, "legacypath-tmpdir")
    assert foreign_plugins(manager) == []
    manager.register(vendor_class_plugin.VendorPlugin, "vendor")
    source = tmp_path / "vendor_class_plugin.py"
    sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    assert foreign_plugins(manager) == [f"vendor_class_plugin ({source}, sha256 {sha256})"]
    # Named as pytest's module, its hook's code still in the vendor's file: still foreign, with that file.
    manager.unregister(name="vendor")
    manager.register(vendor_class_plugin.Disguised, "disguised")
    assert foreign_plugins(manager) == [f"_pytest.legacypath ({source}, sha256 {sha256})"]
