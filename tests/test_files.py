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


def _killed_writer(path, *, hold: bool = False):
    """A real writer of ``path`` in a child process: it writes its temporary, then is killed with
    SIGKILL inside the write (no cleanup runs), or, with ``hold``, waits for a line on its stdin and
    finishes."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import os, signal, sys
        from pytest_palw.files import whole
        with whole({str(path)!r}) as temporary:
            temporary.write_text("written by " + str(os.getpid()))
            print("ready", flush=True)
            if {hold!r}:
                sys.stdin.readline()
            else:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_a_killed_writers_old_temporary_is_swept_by_the_next_write(tmp_path):
    path = tmp_path / "entry.json"
    killed = _killed_writer(path)
    assert killed.wait(timeout=60) == -9
    [left] = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    hour_ago = left.stat().st_mtime_ns - 3601 * 10**9
    os.utime(left, ns=(hour_ago, hour_ago))
    other = tmp_path / ".entry.json.other.json.123.tmp"  # another file's name, not a temporary of entry.json
    other.write_text("x")
    os.utime(other, ns=(hour_ago, hour_ago))
    write_whole(path, "new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "entry.json"]


def test_a_young_temporary_is_left_to_its_writer(tmp_path):
    """A temporary touched within the hour may be a live writer's (another process, another host on a
    shared cache): the next write leaves it, and that writer still finishes whole."""
    path = tmp_path / "entry.json"
    writer = _killed_writer(path, hold=True)
    assert writer.stdout.readline().strip() == "ready"
    write_whole(path, "mine\n")
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    writer.communicate("go\n", timeout=60)
    assert writer.returncode == 0
    assert path.read_text() == f"written by {writer.pid}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]
