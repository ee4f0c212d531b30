"""Overlay series, `git apply` on small trees, and failures named down to the hunk."""

from __future__ import annotations

import pytest

from pytest_palw.builder.patching import (
    apply_patch,
    check_recorded,
    current_patch_set,
    describe_failure,
    hunk_headers,
    overlays_dir,
    read_series,
)
from pytest_palw.errors import PatchError

PATCH = """diff --git a/hello.txt b/hello.txt
index 1111111..2222222 100644
--- a/hello.txt
+++ b/hello.txt
@@ -1,3 +1,3 @@ greeting
 one
-two
+TWO
 three
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+fresh"""  # no final newline, like the seed


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "hello.txt").write_text("one\ntwo\nthree\n")
    return root


def test_apply_patch_without_final_newline(tree, tmp_path):
    patch = tmp_path / "p.patch"
    patch.write_text(PATCH)
    apply_patch(tree, patch)
    assert (tree / "hello.txt").read_text() == "one\nTWO\nthree\n"
    assert (tree / "new.txt").read_text() == "fresh\n"


def test_a_failing_hunk_is_named(tree, tmp_path):
    (tree / "hello.txt").write_text("uno\ndos\ntres\n")
    patch = tmp_path / "p.patch"
    patch.write_text(PATCH)
    with pytest.raises(PatchError) as failure:
        apply_patch(tree, patch, role="overlay")
    message = str(failure.value)
    assert str(patch) in message and "hello.txt" in message
    assert "`@@ -1,3 +1,3 @@ greeting`" in message
    assert not (tree / "new.txt").exists(), "git apply is all-or-nothing"


def test_a_missing_target_is_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    patch = tmp_path / "p.patch"
    patch.write_text(PATCH)
    with pytest.raises(PatchError, match=r"does not apply to hello\.txt: No such file"):
        apply_patch(empty, patch)


def test_apply_inside_another_git_repository_still_patches(tmp_path):
    # A cache inside a checkout must not make git apply resolve paths from that checkout.
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    tree = tmp_path / "deep" / "tree"
    tree.mkdir(parents=True)
    (tree / "hello.txt").write_text("one\ntwo\nthree\n")
    patch = tmp_path / "p.patch"
    patch.write_text(PATCH)
    apply_patch(tree, patch)
    assert (tree / "hello.txt").read_text() == "one\nTWO\nthree\n"


def test_hunk_headers():
    hunks = hunk_headers(PATCH)
    assert hunks["hello.txt"] == [(1, "@@ -1,3 +1,3 @@ greeting")]
    assert hunks["new.txt"] == [(0, "@@ -0,0 +1 @@")]


def test_describe_failure_from_git_stderr(tmp_path):
    stderr = ("Checking patch hello.txt...\nerror: while searching for:\none\ntwo\n\n"
              "error: patch failed: hello.txt:1\nerror: hello.txt: patch does not apply\n")
    line = describe_failure(tmp_path / "x.patch", PATCH, stderr, tmp_path, "overlay")
    assert line.startswith(f"overlay {tmp_path / 'x.patch'} does not apply to hello.txt")
    assert "@@ -1,3 +1,3 @@ greeting" in line and "\n" not in line


def test_read_series(tmp_path):
    (tmp_path / "a.patch").write_text("")
    (tmp_path / "b.patch").write_text("")
    (tmp_path / "series").write_text("# order matters\n\nb.patch  # second file, first applied\na.patch\n")
    assert read_series(tmp_path) == [tmp_path / "b.patch", tmp_path / "a.patch"]
    assert read_series(tmp_path / "missing") == []


def test_overlays_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("PALW_OVERLAYS_DIR", str(tmp_path / "env"))
    assert overlays_dir() == tmp_path / "env"
    assert overlays_dir(tmp_path / "arg") == tmp_path / "arg"


def test_recorded_digests_must_match(tmp_path):
    patch_set = current_patch_set(tmp_path)  # the real seed, no overlays
    check_recorded(patch_set.marker_digests(), patch_set, tmp_path)
    stale = patch_set.marker_digests()
    stale["overlays"] = [{"name": "0001-old.patch", "sha256": "0" * 64}]
    with pytest.raises(PatchError, match="is stale: .* different overlays"):
        check_recorded(stale, patch_set, tmp_path)
