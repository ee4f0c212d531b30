"""pytest_palw/files.py: a file is written whole or not at all."""

import os

import pytest

from pytest_palw.files import FileWriteError, whole, write_whole


def test_a_write_replaces_the_file_in_one_step(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old\n")
    inode = path.stat().st_ino
    write_whole(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_write_that_fails_part_way_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with whole(path) as temporary:
            temporary.write_text("half")
            raise RuntimeError("the writer failed")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_os_error_is_one_line_naming_the_file_and_the_fix(tmp_path):
    with pytest.raises(FileWriteError) as raised:
        write_whole(tmp_path, "x", fix="name a file")
    assert str(raised.value) == f"cannot write {tmp_path} (a directory is in its place): name a file"
    assert "\n" not in str(raised.value) and raised.value.exit_code == 2
    assert os.listdir(tmp_path) == []
