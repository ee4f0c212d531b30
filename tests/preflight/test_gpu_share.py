"""preflight/gpu_share.py: machine-wide GPU slots between processes (file locks), and the llama
context holding one from its creation to its free (runtime/library.py)."""

import select
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.preflight.gpu_share import GpuSlots, slots_for

HOLD = """
import sys, time
from pathlib import Path
from pytest_palw.preflight.gpu_share import GpuSlots
slots = GpuSlots(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), wait_limit_s=60)
slots.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[4]))
"""


def _start(directory, count, member, seconds):
    return subprocess.Popen([sys.executable, "-c", HOLD, str(directory), str(count), str(member), str(seconds)],
                            stdout=subprocess.PIPE, text=True)


def _said_held(process, within_s: float = 60) -> bool:
    """The child printed "held" within ``within_s`` (never blocks longer)."""
    ready, _, _ = select.select([process.stdout], [], [], within_s)
    return bool(ready) and process.stdout.readline().strip() == "held"


def test_a_process_waits_while_every_slot_is_held_and_takes_the_first_freed(tmp_path):
    first, second = _start(tmp_path, 2, 0, 60), _start(tmp_path, 2, 1, 1.0)
    try:
        assert _said_held(first) and _said_held(second)
        slots = GpuSlots(tmp_path, 2, member=0, wait_limit_s=30)  # its own slot is first's, held for a minute
        start = time.monotonic()
        slots.acquire()
        waited = time.monotonic() - start
        assert slots.held and 0.3 < waited < 30, waited  # it took the slot second freed, not its own
        slots.release()
        assert not slots.held
    finally:
        first.kill(), second.kill()


def test_holding_is_counted_within_a_process_and_a_dead_holder_frees_its_slot(tmp_path):
    slots = GpuSlots(tmp_path, 1, member=0, wait_limit_s=30)
    slots.acquire()
    slots.acquire()  # a second context of the same process: no wait for itself
    slots.release()
    assert slots.held
    waiting = _start(tmp_path, 1, 0, 0)
    try:
        assert not _said_held(waiting, within_s=1.0), "another process took the one slot this process holds"
        slots.release()
        assert not slots.held
        assert _said_held(waiting), "the freed slot did not go to the process waiting for it"
        assert waiting.wait(timeout=60) == 0
    finally:
        waiting.kill()
    holder = _start(tmp_path, 1, 0, 60)
    assert _said_held(holder)
    holder.kill()
    holder.wait()
    other = GpuSlots(tmp_path, 1, member=0, wait_limit_s=30)
    other.acquire()  # the killed holder's lock went with it
    other.release()


def test_a_wait_past_the_limit_names_the_holder_and_the_way_out(tmp_path):
    holder = _start(tmp_path, 1, 0, 60)
    try:
        assert _said_held(holder)
        slots = GpuSlots(tmp_path, 1, member=0, wait_limit_s=0.3)
        with pytest.raises(RuntimeLibraryError, match=rf"held by pid {holder.pid}: end the run that holds them, "
                                                      r"or pass --palw-gpu-slots 0"):
            slots.acquire()
        assert not slots.held
    finally:
        holder.kill()


def test_no_limit_is_no_slots_one_object_per_set_and_a_zero_count_is_refused(tmp_path, monkeypatch):
    assert slots_for(0, 3) is None
    monkeypatch.setenv("PALW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert slots_for(2, 0) is slots_for(2, 5)  # one object a process: its holding is counted once
    with pytest.raises(ValueError):
        GpuSlots(tmp_path, 0, member=0)


class _FakeLlama:
    """Just enough of llama_cpp for Model.context and Context.free."""

    LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
    GGML_TYPE_F16 = 1

    def __init__(self, init_result):
        self.init_result, self.freed = init_result, []

    def llama_context_default_params(self):
        return SimpleNamespace()

    def llama_init_from_model(self, model, params):
        if isinstance(self.init_result, BaseException):
            raise self.init_result
        return self.init_result

    def llama_free(self, pointer):
        self.freed.append(pointer)


def _model(tmp_path, llama):
    from pytest_palw.runtime.library import Model

    slots = GpuSlots(tmp_path, 1, member=0, wait_limit_s=5)
    runtime = SimpleNamespace(llama=llama, ffi=SimpleNamespace(cast=lambda kind, pointer: pointer), lib=None,
                              gpu_slots=slots)
    model = object.__new__(Model)
    model.runtime, model.path, model.pointer = runtime, tmp_path / "model.gguf", 1
    return model, slots


@pytest.mark.parametrize("failure", [0, KeyboardInterrupt()], ids=["init returns null", "interrupted"])
def test_a_context_that_fails_to_start_gives_its_slot_back(tmp_path, failure):
    model, slots = _model(tmp_path, _FakeLlama(failure))
    with pytest.raises((RuntimeLibraryError, KeyboardInterrupt)):
        model.context()
    assert not slots.held


def test_a_context_holds_its_slot_until_freed(tmp_path):
    llama = _FakeLlama(1234)
    model, slots = _model(tmp_path, llama)
    first, second = model.context(), model.context()
    assert slots.held
    first.free()
    assert slots.held  # the second context still lives
    second.free()
    second.free()  # freeing twice gives nothing back twice
    assert not slots.held and llama.freed == [1234, 1234]
