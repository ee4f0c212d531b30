"""Worker-to-GPU assignment (issue 7): worker i gets device i mod n, through CUDA_VISIBLE_DEVICES."""

import pytest

from pytest_palw.devices import assign_worker_device


@pytest.mark.parametrize("worker, pool, expected", [
    ("gw0", "0,1", "0"), ("gw1", "0,1", "1"), ("gw2", "0,1", "0"), ("gw7", "0,1,2,3", "3"),
    ("master", "0,1", "0"), ("gw5", "3", "3"),  # more workers than GPUs share them round-robin
])
def test_worker_gets_device_round_robin(worker, pool, expected, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert assign_worker_device(worker, pool) == expected
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == expected


def test_no_gpu_leaves_the_environment_alone(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: "auto" finds no device
    assert assign_worker_device("gw1", "auto") is None
    import os

    assert "CUDA_VISIBLE_DEVICES" not in os.environ
