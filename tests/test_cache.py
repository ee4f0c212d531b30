"""pytest_palw/cache.py's file digest: the sha256 of every byte, holes of a sparse file included (they
read as zeros), without reading the holes from the disk."""

import hashlib
import io
import os

import pytest

from pytest_palw.cache import CHUNK, sha256_file, sha256_stream

MIB = 1 << 20

# (offset, bytes) written into a file of SIZE: data at the start, in the middle, at the very end,
# and none (all hole).
LAYOUTS = {
    "all hole": [],
    "data, hole, data": [(0, b"head" * 1000), (40 * MIB + 3, b"\x01middle\xff"), (64 * MIB - 5, b"tail!")],
    "hole at the end": [(5, b"x" * (3 * MIB))],
    "dense": [(0, bytes(range(256)) * 4096)],
}
SIZE = 64 * MIB


def _write(path, layout, size=SIZE):
    with open(path, "wb") as handle:
        handle.truncate(size)
        for offset, data in layout:
            handle.seek(offset)
            handle.write(data)


def _expected(layout, size=SIZE):
    content = bytearray(size)
    for offset, data in layout:
        content[offset:offset + len(data)] = data
    return hashlib.sha256(content).hexdigest()


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_sparse_file_hashes_as_every_byte_of_it(tmp_path, name):
    path = tmp_path / "f.bin"
    _write(path, LAYOUTS[name])
    assert sha256_file(path) == _expected(LAYOUTS[name])


def test_a_byte_flipped_in_data_or_written_into_a_hole_changes_the_digest(tmp_path):
    path = tmp_path / "f.bin"
    layout = LAYOUTS["data, hole, data"]
    _write(path, layout)
    before = sha256_file(path)
    for offset in (1, 40 * MIB + 4, 20 * MIB, SIZE - 1):  # in data, in data, in a hole, the last byte
        with open(path, "r+b") as handle:
            handle.seek(offset)
            old = handle.read(1)
            handle.seek(offset)
            handle.write(bytes([old[0] ^ 0x01]))
        assert sha256_file(path) != before, offset
        with open(path, "r+b") as handle:
            handle.seek(offset)
            handle.write(old)
        assert sha256_file(path) == before, offset


def test_a_stream_hashes_what_is_left_to_read_from_its_position(tmp_path):
    path = tmp_path / "f.bin"
    layout = LAYOUTS["data, hole, data"]
    _write(path, layout)
    content = bytearray(SIZE)
    for offset, data in layout:
        content[offset:offset + len(data)] = data
    for start in (0, 7, CHUNK + 1, 40 * MIB + 5, SIZE):
        with open(path, "rb") as handle:
            handle.seek(start)
            assert sha256_stream(handle) == hashlib.sha256(content[start:]).hexdigest(), start
            assert handle.tell() == SIZE  # read to its end, as a plain read would leave it


def test_a_stream_without_a_file_descriptor_is_read_through():
    data = os.urandom(3 * CHUNK + 17)
    assert sha256_stream(io.BytesIO(data)) == hashlib.sha256(data).hexdigest()


# -- a tree's digest (a build's producer copy, the native runtime: cache keys) -----------------------


def _tree(tmp_path):
    from pytest_palw.cache import tree_digest

    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.h").write_text("int a;\n")
    return root, tree_digest(root)


def test_a_fifo_in_a_tree_changes_its_digest_without_being_read(tmp_path):
    """A named pipe added to a tree is a change: counted by its kind, never opened (opening one for
    reading waits for a writer forever)."""
    from pytest_palw.cache import tree_digest

    root, before = _tree(tmp_path)
    os.mkfifo(root / "extra.h")
    assert tree_digest(root) != before


def test_a_file_name_that_is_not_utf8_is_hashed_by_its_bytes(tmp_path):
    from pytest_palw.cache import tree_digest

    root, before = _tree(tmp_path)
    (root / os.fsdecode(b"\xff.h")).write_text("int b;\n")
    os.symlink(os.fsdecode(b"\xfe-target"), root / "link.h")
    after = tree_digest(root)
    assert after != before
    (root / os.fsdecode(b"\xff.h")).rename(root / os.fsdecode(b"\xfd.h"))
    assert tree_digest(root) not in (before, after)


def test_a_utf8_tree_keeps_the_digest_it_had(tmp_path):
    """Names are hashed as their bytes: for UTF-8 names the same bytes as before, so no cache key moves."""
    from pytest_palw.cache import tree_digest

    root, before = _tree(tmp_path)
    (root / "é.h").write_text("int c;\n")
    expected = hashlib.sha256()
    for name in sorted(["a.h", "é.h"]):
        expected.update(name.encode() + b"\0" + sha256_file(root / name).encode() + b"\n")
    assert tree_digest(root) == expected.hexdigest()
