"""Faults made for real, one test per row of #31: damaged bytes are not trusted (the certificate
states what was read in the run), damage is repaired or named, a refused restore leaves the cache
byte-identical, files are written whole or not at all, and each bad input is one line with its
exit code.

Each test makes its fault on real files: a byte flipped with the mtime kept (os.utime back to the
old nanoseconds), a truncation, a tampered archive, a file size limit (RLIMIT_FSIZE: the kernel
fails the write with EFBIG, as a full disk fails it with ENOSPC), a directory made immutable with
``chattr +i`` (we run as root, and root ignores permission bits; an immutable directory refuses
root too). Every cache a test damages is its own ($PALW_CACHE_DIR under tmp_path); the shared
cache is only read (its CPU build is archived once, as `palw build --cache-to` does)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from pytest_palw.builder import carry
from pytest_palw.paths import CONFORMANCE_DIR

CASES = str(CONFORMANCE_DIR / "test_class_counts.py")
DATA = Path(__file__).parent / "certificate" / "data"


# -- helpers -------------------------------------------------------------------------------------


def flip_keeping_mtime(path: Path, offset: int) -> None:
    """One byte of ``path`` inverted in place; its mtime (ns) and size as before."""
    stat = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size


def comment_offset(library: Path) -> int:
    """An offset inside the ELF .comment section (the compiler's version string): a byte changed
    there changes the file's digest and nothing the loader reads."""
    offset = library.read_bytes().find(b"GCC: (")
    assert offset > 0, f"no .comment in {library}"
    return offset + 3


def snapshot(root: Path) -> dict:
    """Every entry under ``root``: its kind, bytes (sha256 or link text), mode, size and a file's mtime
    (a directory's mtime says only that an entry came and went: a refused restore's temporary)."""
    found = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory, name)
            stat = path.lstat()
            if path.is_symlink():
                content = "link:" + os.readlink(path)
            elif path.is_dir():
                content = "dir"
            else:
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            mtime = None if content == "dir" else stat.st_mtime_ns
            found[str(path.relative_to(root))] = (content, stat.st_mode, stat.st_size, mtime)
    return found


def _exit_and_output(result) -> tuple[int, str]:
    """(exit code, stdout and stderr) of a child: a CompletedProcess (`palw`) or pytester's RunResult (pytest)."""
    if isinstance(result, pytest.RunResult):
        return result.ret, result.stdout.str() + "\n" + result.stderr.str()
    return result.returncode, result.stdout + result.stderr


def output_lines(result, fragment: str) -> list[str]:
    return [line for line in _exit_and_output(result)[1].splitlines() if fragment in line]


def assert_one_line(result, exit_code: int, fragment: str, *more: str) -> str:
    """Exit ``exit_code``; exactly one line of the output names ``fragment`` (and ``more``); no traceback."""
    returncode, text = _exit_and_output(result)
    assert returncode == exit_code, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    lines = output_lines(result, fragment)
    assert len(lines) == 1, text[-3000:]
    for part in more:
        assert part in lines[0], lines[0]
    return lines[0]


def _pytest(pytester, *args, timeout=600):
    """pytest in a child process of its own, in ``pytester.path`` (a test not given ``private_cache``
    asks for ``shared_palw_cache``: pytester's fresh HOME would otherwise be a cache with no build)."""
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *map(str, args), timeout=timeout)


@pytest.fixture
def immutable(tmp_path):
    """``immutable(path)``: ``chattr +i`` (undone after the test); skips where the file system has no
    such attribute."""
    made = []

    def make(path: Path) -> Path:
        result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {result.stderr.strip()}")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


# -- the CPU build, archived once; each test restores it into a cache of its own ----------------


@pytest.fixture(scope="module")
def carried(cpu_build, tmp_path_factory):
    """(sdist, archive directory, archive) of this host's CPU build (`palw build --cache-to`)."""
    from pytest_palw.builder.source import locate_source

    source = locate_source(None, download=False)
    if source is None:
        pytest.skip("no cached llama-cpp-python sdist: run `palw build` once")
    directory = tmp_path_factory.mktemp("carried")
    archive = carry.save(cpu_build, directory)
    return source.path, directory, archive


@pytest.fixture
def restored(carried, private_cache, run_palw):
    """A private cache holding the carried build, restored by `palw build --cache-from`: its manifest."""
    sdist, directory, _ = carried
    result = run_palw("build", "--source", sdist, "--cache-from", directory, "--print-manifest",
                      "--no-binding-install")
    assert result.returncode == 0 and "palw: restored" in result.stderr, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


def _libllama(manifest_path: Path) -> Path:
    return Path(json.loads(manifest_path.read_text())["outputs"]["libllama"]).resolve()


# -- 1. what the certificate states was read in this run -----------------------------------------


def test_a_model_byte_flipped_with_its_mtime_kept_is_stated_and_diffed(cpu_build, shared_palw_cache, run_palw,
                                                                        tmp_path, pytester):
    """Row 1: the model's sha256 is the bytes of this run, never the memo of path, size and mtime."""
    from pytest_palw.fixtures.models.catalog import ensure_model

    model = tmp_path / "model.gguf"
    shutil.copyfile(ensure_model("tiny"), model)
    common = [f"--palw-lib={cpu_build.path}", f"--palw-model={model}", CASES]
    clean = _pytest(pytester, f"--palw-certificate={tmp_path / 'clean.json'}", *common)
    assert (tmp_path / "clean.json").is_file(), clean.stdout.str()[-3000:]
    flip_keeping_mtime(model, model.stat().st_size - 4096)
    flipped = _pytest(pytester, f"--palw-certificate={tmp_path / 'flipped.json'}", *common)
    assert (tmp_path / "flipped.json").is_file(), flipped.stdout.str()[-3000:]

    before = json.loads((tmp_path / "clean.json").read_text())["model"]["sha256"]
    stated = json.loads((tmp_path / "flipped.json").read_text())["model"]["sha256"]
    assert stated == hashlib.sha256(model.read_bytes()).hexdigest() != before
    diff = run_palw("diff", tmp_path / "clean.json", tmp_path / "flipped.json")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert any(line.startswith("changed") and "model sha256" in line and stated[:16] in line
               for line in diff.stdout.splitlines()), diff.stdout


def test_the_certificate_states_the_libraries_it_mapped(cpu_build, shared_palw_cache, tmp_path, pytester):
    """Row 1: each runtime library's sha256 in the certificate is of the file this run mapped."""
    result = _pytest(pytester, f"--palw-certificate={tmp_path / 'c.json'}", f"--palw-lib={cpu_build.path}", CASES)
    document = json.loads((tmp_path / "c.json").read_text())
    libraries = document["runtime"]["libraries"]
    lib_dir = Path(document["runtime"]["lib_dir"])
    assert any(name.startswith("libllama.so") for name in libraries), result.stdout.str()[-2000:]
    for name, digest in libraries.items():
        assert digest == hashlib.sha256((lib_dir / name).read_bytes()).hexdigest(), name


# -- 2. damage found is damage repaired, or named ------------------------------------------------


def test_a_flipped_library_byte_is_no_cache_hit(restored, carried, run_palw, pytester):
    """Row 1 and 2: one byte of libllama.so flipped with its mtime kept: `palw build` says what is
    damaged and rebuilds (stopped here once it has begun: the restored build has no objects, so
    the rebuild is a full compile), and a run naming the build refuses it in one line."""
    library = _libllama(restored)
    flip_keeping_mtime(library, comment_offset(library))
    refused = _pytest(pytester, f"--palw-lib={restored}", f"--palw-certificate={restored.parent / 'c.json'}", CASES)
    assert_one_line(refused, 7, "is damaged", "libllama.so", "palw build")

    sdist, _, _ = carried
    build = subprocess.Popen([sys.executable, "-m", "pytest_palw.cli", "build", "--source", str(sdist),
                              "--no-binding-install"], stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = build.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "configuring afresh" in line or "cmake configure" in line or "ninja" in line:
                break
    finally:
        os.killpg(build.pid, signal.SIGTERM)
        build.wait(timeout=60)
    text = "".join(seen)
    assert "cache hit" not in text, text
    damaged = [line for line in seen if "is damaged" in line]
    assert len(damaged) == 1 and "libllama.so" in damaged[0] and "rebuilding" in damaged[0], text


def test_a_truncated_library_is_named_not_a_crash(restored, run_palw, tmp_path):
    """Row 2: a truncated libllama.so stops `palw certify` in one line before anything maps it
    (mapping it killed the process with SIGBUS)."""
    library = _libllama(restored)
    os.truncate(library, library.stat().st_size // 2)
    result = run_palw("certify", "--lib", restored, "--certificate", tmp_path / "c.json", cwd=tmp_path)
    assert_one_line(result, 7, "is damaged", "libllama.so", "missing" if not library.exists() else "sha256")
    assert not (tmp_path / "c.json").exists()


def test_a_truncated_cached_model_is_regenerated(private_cache, run_palw):
    """Row 2: `palw models generate` on a truncated cached model makes it again, and prints the
    digest of the file as written (the generator is deterministic)."""
    first = run_palw("models", "generate", "--profile", "tiny")
    assert first.returncode == 0, first.stderr[-2000:]
    digest, path = first.stdout.split()
    os.truncate(path, Path(path).stat().st_size // 3)
    again = run_palw("models", "generate", "--profile", "tiny")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.split() == [digest, path]
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
    assert len(output_lines(again, "is damaged")) == 1 and "regenerating" in again.stderr


def test_a_cached_model_byte_flipped_with_its_mtime_kept_is_regenerated(private_cache, run_palw):
    """Row 2: `palw models generate` reads the cached file's bytes, not its size and mtime."""
    first = run_palw("models", "generate", "--profile", "tiny")
    digest, path = first.stdout.split()
    flip_keeping_mtime(Path(path), Path(path).stat().st_size - 100)
    again = run_palw("models", "generate", "--profile", "tiny")
    assert again.returncode == 0 and again.stdout.split() == [digest, path], again.stderr[-2000:]
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
    line = assert_one_line(again, 0, "is damaged", "sha256")
    assert "regenerating" in line


def test_a_users_truncated_gguf_is_one_line_naming_it(cpu_build, run_palw, tmp_path):
    """Row 2 and 5: a user's own GGUF that fails its check: one line naming the file, printed once."""
    from pytest_palw.fixtures.models.catalog import ensure_model

    model = tmp_path / "mine.gguf"
    with open(ensure_model("tiny"), "rb") as source, open(model, "wb") as target:
        target.write(source.read(1 << 20))
    result = run_palw("certify", "--lib", cpu_build.path, "--model", model, "--certificate", tmp_path / "c.json",
                      cwd=tmp_path)
    assert_one_line(result, 8, f"{model} ", "truncated or damaged")


# -- 3. restores are atomic ----------------------------------------------------------------------


def _tampered(original: Path, target: Path, *, drop=lambda name: False, extra: tarfile.TarInfo | None = None,
              change=None) -> None:
    """A copy of the archive ``original`` at ``target``: members for which ``drop(name)`` holds left
    out, ``change(name, bytes)`` applied to each file's bytes, ``extra`` appended after the rest."""
    import io

    with tarfile.open(original, "r:gz") as source, tarfile.open(target, "w:gz", compresslevel=1) as copy:
        for member in source.getmembers():
            if drop(member.name):
                continue
            data = source.extractfile(member).read() if member.isfile() else None
            if data is not None and change is not None:
                data = change(member.name, data)
                member.size = len(data)
            copy.addfile(member, io.BytesIO(data) if data is not None else None)
        if extra is not None:
            copy.addfile(extra, io.BytesIO(b"x" * extra.size))


def _outside_member() -> tarfile.TarInfo:
    info = tarfile.TarInfo("build/../../escaped.txt")
    info.size = 1
    return info


def _flip_libllama(name: str, data: bytes) -> bytes:
    if Path(name).name.startswith("libllama.so") and b"GCC: (" in data:
        at = data.find(b"GCC: (") + 3
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    return data


TAMPERINGS = {
    "a member outside the cache, after the others": dict(extra=_outside_member()),
    "no manifest": dict(drop=lambda name: name.endswith("/palw-manifest.json")),
    "no llama.h": dict(drop=lambda name: name.endswith("/source/include/llama.h")),
    "a library byte flipped": dict(change=_flip_libllama),
    "truncated": None,
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_tampered_archive_leaves_the_cache_byte_identical(tampering, restored, carried, run_palw, tmp_path):
    """Row 3: each tampered archive is refused in one line (exit 6), and the cache (a build of the
    key whose library was removed, so a restore is tried) is byte-identical after the refusal."""
    sdist, _, archive = carried
    directory = tmp_path / "tampered"
    directory.mkdir()
    target = directory / archive.name
    if TAMPERINGS[tampering] is None:
        target.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    else:
        _tampered(archive, target, **TAMPERINGS[tampering])
    _libllama(restored).unlink()  # the cached build is no longer reusable: the archive is tried
    cache = Path(os.environ["PALW_CACHE_DIR"])
    before = snapshot(cache)
    result = run_palw("build", "--source", sdist, "--cache-from", directory, "--no-binding-install")
    assert_one_line(result, 6, "is refused", str(target), "nothing of it was restored")
    assert snapshot(cache) == before
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_a_restored_build_configures_afresh_where_it_now_is(tmp_path):
    """Row 3: a build directory configured elsewhere (as a restored one was) is configured here,
    said in one line, where CMake itself refuses the moved CMakeCache.txt."""
    from pytest_palw.builder.api import forget_moved_configuration

    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake on PATH")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(moved NONE)\n")
    origin = tmp_path / "origin" / "build"
    subprocess.run([cmake, "-S", project, "-B", origin], check=True, capture_output=True)
    control, here = tmp_path / "control" / "build", tmp_path / "here" / "build"
    shutil.copytree(origin, control)
    shutil.copytree(origin, here)
    refused = subprocess.run([cmake, "-S", project, "-B", control], capture_output=True, text=True)
    assert refused.returncode != 0 and "is different" in refused.stderr

    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        forget_moved_configuration(here, project)
    assert said.getvalue().count("\n") == 1 and "configuring afresh" in said.getvalue()
    subprocess.run([cmake, "-S", project, "-B", here], check=True, capture_output=True)
    with contextlib.redirect_stderr(io.StringIO()) as quiet:
        forget_moved_configuration(here, project)  # configured here now: nothing to say
    assert quiet.getvalue() == ""


# -- 4. files are written whole or not at all ----------------------------------------------------


def _file_size_limit(limit: int):
    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_writes


def test_a_certificate_that_cannot_be_written_whole_is_not_written_nor_announced(cpu_build, tmp_path):
    """Row 4: the disk refuses the certificate part-way (a 16 KiB file size limit: EFBIG, as a full
    disk gives ENOSPC): no JSON, no page, no temporary left; one line; the last line names no file."""
    certificate = tmp_path / "c.json"
    result = subprocess.run([sys.executable, "-m", "pytest_palw.cli", "certify", "--lib", str(cpu_build.path),
                             "--certificate", str(certificate), "--", "-p", "no:cacheprovider", "-k",
                             "test_class_counts"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600,
                            preexec_fn=_file_size_limit(16 << 10))
    assert_one_line(result, 2, "cannot write", str(certificate), "File too large")
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"palw: no certificate written to {certificate}") and "report" not in last


def test_two_certifications_of_one_path_the_second_refuses(cpu_build, tmp_path):
    """Row 4: a second `palw certify` naming the certificate another one is writing refuses in one
    line; the first finishes and announces the file it wrote."""
    certificate = tmp_path / "c.json"
    argv = [sys.executable, "-m", "pytest_palw.cli", "certify", "--lib", str(cpu_build.path), "--certificate",
            str(certificate), "--", "-p", "no:cacheprovider", "-k", "test_class_counts"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    from pytest_palw.cache import key_of
    from pytest_palw.paths import cache_dir

    lock = cache_dir("locks") / f"certificate-{key_of(str(certificate))}.lock"
    deadline = time.monotonic() + 120
    while not (lock.is_file() and lock.read_text().strip() == str(first.pid)):
        assert time.monotonic() < deadline and first.poll() is None, "the first run never took the lock"
        time.sleep(0.1)
    second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    out, err = first.communicate(timeout=600)
    assert_one_line(second, 2, "is writing", str(first.pid), str(certificate))
    assert first.returncode == 0, (out + err)[-3000:]
    assert out.strip().splitlines()[-1].startswith(f"palw: certificate {certificate}: not certified")
    assert certificate.is_file() and certificate.with_suffix(".html").is_file()


# -- 5. one line for every bad input or environment ----------------------------------------------


def _certificate_edited(tmp_path: Path, change) -> Path:
    document = json.loads((DATA / "cpu-certificate.json").read_text())
    change(document)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    return path


EDITS = {
    "without verdict": (lambda d: d.pop("verdict"), "'verdict' is a required property"),
    "a null verdict": (lambda d: d.update(verdict=None), "verdict:"),
    "cases not a list": (lambda d: d.update(cases={}), "cases:"),
    "version 99": (lambda d: d.update(version=99), "version 99"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_diff_and_report_refuse_what_is_no_certificate(edit, run_palw, tmp_path):
    """Row 5: `palw diff` and `palw report` validate against the schema first: exit 2, one line."""
    change, fragment = EDITS[edit]
    edited = _certificate_edited(tmp_path, change)
    for result in (run_palw("diff", DATA / "cpu-certificate.json", edited),
                   run_palw("report", edited, "-o", tmp_path / "page.html")):
        assert_one_line(result, 2, "palw: error:", str(edited), fragment)
    assert not (tmp_path / "page.html").exists()


def test_report_into_a_directory_is_one_line(run_palw, tmp_path):
    result = run_palw("report", DATA / "cpu-certificate.json", "-o", tmp_path)
    assert_one_line(result, 2, "palw: error:", str(tmp_path), "-o")


def test_a_manifest_that_is_not_json_is_one_line(run_palw, tmp_path):
    manifest = tmp_path / "palw-manifest.json"
    manifest.write_text("not json\n")
    result = run_palw("certify", "--lib", manifest, "--certificate", tmp_path / "c.json", cwd=tmp_path)
    assert_one_line(result, 7, "cannot read the runtime manifest", str(manifest), "palw build")


def test_a_cache_dir_that_is_a_file_is_one_line(run_palw, tmp_path):
    cache = tmp_path / "not-a-directory"
    cache.write_text("")
    result = run_palw("certify", "--certificate", tmp_path / "c.json", env={"PALW_CACHE_DIR": str(cache)},
                      cwd=tmp_path)
    assert_one_line(result, 2, "PALW_CACHE_DIR", str(cache))


def test_a_read_only_cache_is_one_line(carried, run_palw, tmp_path, immutable):
    sdist, _, _ = carried
    cache = tmp_path / "read-only-cache"
    cache.mkdir()
    immutable(cache)
    result = run_palw("build", "--source", sdist, env={"PALW_CACHE_DIR": str(cache)})
    assert_one_line(result, 2, "PALW_CACHE_DIR", str(cache))


def test_cache_to_naming_a_file_is_one_line(carried, run_palw, private_cache, tmp_path):
    sdist, _, _ = carried
    named = tmp_path / "a-file"
    named.write_text("")
    result = run_palw("build", "--source", sdist, "--cache-to", named)
    assert_one_line(result, 2, "palw: error:", f"--cache-to {named} is a file")
