"""The NVML path of the worker report. No GPU here, so the bindings are stood in for by a
minimal module with pynvml's names; what is checked is our use of them and the fallbacks."""

import sys
import types
from types import SimpleNamespace

import pytest

from apps.monitoring.gpu import gpu_sample


class NVMLError(Exception):
    pass


def fake_pynvml(*, init_fails=False, count=1):
    calls = []
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError

    def init():
        calls.append("init")
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    module.nvmlInit = init
    module.nvmlShutdown = lambda: calls.append("shutdown")
    module.nvmlDeviceGetCount = lambda: count
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H200"  # older bindings return bytes
    module.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=2 * 1024**3, total=141 * 1024**3)
    module.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=37, memory=12)
    return module, calls


def test_without_the_nvml_bindings_there_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert gpu_sample() == []


def test_without_a_driver_there_is_no_gpu(monkeypatch):
    module, calls = fake_pynvml(init_fails=True)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert gpu_sample() == [] and calls == ["init"]


@pytest.mark.parametrize("count", [0, 2])
def test_each_gpu_is_reported_with_utilization_and_memory(monkeypatch, count):
    module, calls = fake_pynvml(count=count)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    gpus = gpu_sample()
    assert [g["index"] for g in gpus] == list(range(count))
    if count:
        assert gpus[1] == {"index": 1, "name": "NVIDIA H200", "utilization_percent": 37,
                           "memory_used_bytes": 2 * 1024**3, "memory_total_bytes": 141 * 1024**3}
    assert calls == ["init", "shutdown"]
