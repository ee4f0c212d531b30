"""runtime/gpu_share.py: machine-wide GPU slots between processes (file locks)."""

import subprocess
import sys
import time

import pytest

from pytest_palw.runtime.gpu_share import GpuSlots, slots_for

HOLD = """
import sys, time
from pathlib import Path
from pytest_palw.runtime.gpu_share import GpuSlots
slots = GpuSlots(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
slots.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[4]))
"""


def _holder(directory, count, member, seconds):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), str(count), str(member), str(seconds)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_process_waits_while_every_slot_is_held_and_takes_the_first_freed(tmp_path):
    first, second = _holder(tmp_path, 2, 0, 60), _holder(tmp_path, 2, 1, 1.0)
    try:
        slots = GpuSlots(tmp_path, 2, member=0)  # its own slot is first's, held for a minute
        start = time.monotonic()
        slots.acquire()
        waited = time.monotonic() - start
        assert slots.held and 0.3 < waited < 30, waited  # it took the slot second freed, not its own
        slots.release()
        assert not slots.held
    finally:
        first.kill(), second.kill()


def test_holding_is_counted_within_a_process_and_a_dead_holder_frees_its_slot(tmp_path):
    slots = GpuSlots(tmp_path, 1, member=0)
    slots.acquire()
    slots.acquire()  # a second context of the same process: no wait for itself
    slots.release()
    assert slots.held
    waiting = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "1", "0", "0"], stdout=subprocess.PIPE,
                               text=True)
    try:
        time.sleep(1.0)
        assert waiting.poll() is None, "another process took the one slot this process holds"
        slots.release()
        assert not slots.held
        assert waiting.stdout.readline().strip() == "held"  # the freed slot went to the one waiting
        assert waiting.wait(timeout=60) == 0
    finally:
        waiting.kill()
    holder = _holder(tmp_path, 1, 0, 60)
    holder.kill()
    holder.wait()
    other = GpuSlots(tmp_path, 1, member=0)
    other.acquire()  # the killed holder's lock went with it
    other.release()


def test_no_limit_is_no_slots_and_a_zero_count_is_refused(tmp_path):
    assert slots_for(0, 3) is None
    with pytest.raises(ValueError):
        GpuSlots(tmp_path, 0, member=0)
