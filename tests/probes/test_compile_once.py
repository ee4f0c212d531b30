"""The probes' one compile-once helper (probes/compile.py), with the host's C compiler."""

import shutil

import pytest

from pytest_palw.probes.compile import compile_once


def test_a_helper_is_compiled_once_whole_and_a_failure_leaves_nothing(tmp_path):
    cc = shutil.which("cc") or pytest.fail("a C compiler is a test dependency")
    target = tmp_path / "helper-0123.so"
    made = compile_once(target, [cc, "-shared", "-fPIC"], what="building a helper",
                        source=("int helper(void) { return 7; }\n", ".c"), failure=lambda e: f"no: {e}")
    assert made == target and target.read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "helper-0123.c").is_file() and not list(tmp_path.glob("*.partial"))
    stamp = target.stat().st_mtime_ns
    # Made: not compiled again (a broken source would fail if it were).
    assert compile_once(target, [cc, "-shared", "-fPIC"], what="building a helper",
                        source=("not C\n", ".c"), failure=lambda e: f"no: {e}") == target
    assert target.stat().st_mtime_ns == stamp

    broken = tmp_path / "broken-4567.so"
    with pytest.raises(AssertionError, match=r"(?s)^no: .*error: expected expression"):
        compile_once(broken, [cc, "-shared", "-fPIC"], what="building a helper",
                     source=("int broken(void) { return }\n", ".c"), failure=lambda e: f"no: {e}")
    assert not broken.exists() and not list(tmp_path.glob("broken*.partial"))
