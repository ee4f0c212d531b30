"""Which cached build a run uses when none is named (builder/choice.py), and `palw build --variant
cuda`'s defaults on a GPU machine."""

from __future__ import annotations

import json

import pytest

from pytest_palw.builder import choice
from pytest_palw.builder.manifest import MANIFEST_NAME, Manifest
from pytest_palw.builder.patching import current_patch_set
from pytest_palw.builder.plan import native_runtime
from pytest_palw.devices import Device

H200 = Device(0, "NVIDIA H200", 900, "580.159.04")


@pytest.fixture
def cache(private_cache):
    native = native_runtime()

    def add(name, *, variant="cuda", arch="90", pin=900, created="2026-12-03T10:00:00+00:00",
            native_sha=native.sha256, trace=True):
        directory = private_cache / "builds" / name
        (directory / "bin").mkdir(parents=True)
        libllama = directory / "bin" / "libllama.so"
        libllama.write_bytes(b"x")
        inputs = {**current_patch_set().describe(), "native": {"sha256": native_sha}}
        manifest = Manifest(key=name, variant=variant, cuda_arch=arch if variant == "cuda" else None,
                            pinned_cc=pin, trace=trace, inputs=inputs, cmake_flags=[], tools={},
                            outputs={"lib_dir": str(directory / "bin"), "libllama": str(libllama),
                                     "ggml_libs": [], "tools": {}},
                            source_dir="", include_dirs=[], binding_python_path=None, binding={},
                            build_seconds=1.0, created=created)
        manifest.write(directory / MANIFEST_NAME)
        return directory

    return add


def test_arch_match():
    assert choice.arch_match("90", 900) == 2
    assert choice.arch_match("89;90", 900) == 2
    assert choice.arch_match("90a", 900) == 2
    assert choice.arch_match("89", 900) == 1  # runs through the PTX of compute_89
    assert choice.arch_match("100", 900) == 0
    assert choice.arch_match(None, 900) == 0


def test_the_pinned_build_for_the_device_is_chosen_and_named(cache):
    cache("cuda-ada", arch="89;90", pin=None, created="2026-12-03T12:00:00+00:00")  # newer, pin 890
    chosen_dir = cache("cuda-h200", arch="90", pin=900)
    cache("cuda-other-native", arch="90", pin=900, native_sha="0" * 64)  # another checkout's runtime
    cache("cpu-x", variant="cpu", pin=None)
    chosen = choice.choose_cuda(H200)
    assert chosen.manifest.path.parent == chosen_dir
    assert "pinned cc 900" in chosen.line and "2 suitable" in chosen.line and choice.RULE in chosen.line
    assert "\n" not in chosen.line


def test_newest_breaks_a_tie_and_unsuitable_arches_are_left_out(cache):
    cache("cuda-old", arch="90", created="2026-12-01T00:00:00+00:00")
    newest = cache("cuda-new", arch="90", created="2026-12-02T00:00:00+00:00")
    cache("cuda-blackwell", arch="100", created="2026-12-04T00:00:00+00:00")
    assert choice.choose_cuda(H200).manifest.path.parent == newest


def test_no_suitable_build(cache):
    cache("cuda-blackwell", arch="100")
    assert choice.choose_cuda(H200) is None


def test_build_defaults_follow_the_visible_device(monkeypatch):
    from pytest_palw import devices

    monkeypatch.setattr(devices, "visible_devices", lambda: [H200])
    assert choice.for_visible_device(None, None)[:2] == ("90", 900)
    assert choice.for_visible_device("89;90", 890)[:2] == ("89;90", 890)  # what the user asked stays
    monkeypatch.setattr(devices, "visible_devices", lambda: [])
    arch, pin, line = choice.for_visible_device(None, None)
    assert (arch, pin) == ("89;90", None) and "890" in line


def test_a_manifest_without_the_cxx_check_still_loads(cache):
    """Manifests written before the C++ runtime check existed stay readable."""
    directory = cache("cuda-h200")
    data = json.loads((directory / MANIFEST_NAME).read_text())
    data.pop("cxx_runtime")
    (directory / MANIFEST_NAME).write_text(json.dumps(data))
    assert Manifest.load(directory / MANIFEST_NAME).cxx_runtime == {}
