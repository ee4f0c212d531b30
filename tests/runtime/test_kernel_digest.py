"""The kernel digest is the sha256 of the bytes this process mapped, read in this run: not a value
remembered by path, size and mtime, and not the file that now sits at the path."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.runtime.kernel_digest import mapped_library, mapped_sha256

CHILD = """
import ctypes, hashlib, os, sys
from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.runtime.kernel_digest import mapped_library, mapped_sha256
path, prefix = sys.argv[1], sys.argv[2]
ctypes.CDLL(path)
mapping = mapped_library(prefix)
assert mapping is not None and mapping.path.name == os.path.basename(path), mapping
before = mapped_sha256(mapping)
# the file at the path is replaced (a rebuild): a new inode with other bytes
replacement = path + ".new"
with open(path, "rb") as old, open(replacement, "wb") as new:
    new.write(old.read() + b"another build")
os.replace(replacement, path)
try:
    after = mapped_sha256(mapping)
except RuntimeLibraryError as error:
    after = "refused: " + str(error)
print(before)
print(after)
"""


@pytest.fixture
def a_library(cpu_build) -> str:
    return str(cpu_build.lib_dir / "libggml-base.so")


def test_the_digest_is_of_the_mapped_bytes_even_after_the_file_is_replaced(tmp_path, a_library):
    source = a_library
    library = tmp_path / "libpalwdigestprobe.so"
    shutil.copyfile(source, library)
    original = hashlib.sha256(library.read_bytes()).hexdigest()
    result = subprocess.run([sys.executable, "-c", CHILD, str(library), "libpalwdigestprobe"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    before, after = result.stdout.split("\n")[:2]
    assert before == original
    replaced = hashlib.sha256(library.read_bytes()).hexdigest()
    assert replaced != original
    # through /proc/self/map_files the mapped inode is still read; where that is not readable the
    # path is refused (another inode), never hashed as if it were the mapped file
    assert after == original or after.startswith("refused: ") and "can no longer be read" in after, after


def test_no_mapping_of_that_name():
    assert mapped_library("libthis-name-is-never-mapped") is None


def test_a_mapping_whose_file_is_gone_is_refused(tmp_path):
    from pytest_palw.runtime.kernel_digest import Mapping

    missing = Mapping(tmp_path / "gone.so", "0-1", 1)
    with pytest.raises(RuntimeLibraryError, match="can no longer be read"):
        mapped_sha256(missing)


def test_the_digest_of_a_library_this_process_maps(a_library):
    ctypes.CDLL(a_library)
    mapping = mapped_library("libggml-base.so")
    assert mapping is not None and os.path.exists(mapping.path)
    assert mapped_sha256(mapping) == hashlib.sha256(mapping.path.read_bytes()).hexdigest()
