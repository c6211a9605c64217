"""`kvbench run` on CUDA: the measured memory feeds the one budget formula (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbench.build import model_executors
from kvbench.build.model_executors import ModelExecutors
from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError
from kvbench.execution.kv_budget import CudaMemoryProfile
from kvbench.models.presets import get_preset

GiB = 1024**3
CUDA = SimpleNamespace(type="cuda")


def budget(config: EngineConfig, device=CUDA) -> int:
    return ModelExecutors().kv_budget_bytes(config, device, None, get_preset("tiny"), 2048)


def test_cuda_budget_is_the_formula_over_the_measured_profile(monkeypatch):
    measured = CudaMemoryProfile(total_bytes=80 * GiB, weight_bytes=16 * GiB, activation_bytes=GiB)
    monkeypatch.setattr(model_executors, "profile_cuda_memory", lambda *_: measured)
    assert budget(EngineConfig()) == 59_055_800_320  # floor(80 GiB x 0.9) - 17 GiB
    assert budget(EngineConfig(gpu_memory_utilization=0.5)) == 40 * GiB - 17 * GiB
    assert budget(EngineConfig(kv_memory="1GiB")) == GiB  # given: nothing is measured
    with pytest.raises(KvbenchInputError, match="no memory left for the KV cache on"):
        budget(EngineConfig(gpu_memory_utilization=0.2))


def test_cpu_budget_is_the_default_or_the_given_size():
    cpu = SimpleNamespace(type="cpu")
    assert budget(EngineConfig(), cpu) == 64 * 2**20
    assert budget(EngineConfig(kv_memory="2MiB"), cpu) == 2 * 2**20
    with pytest.raises(KvbenchInputError, match="needs CUDA"):
        budget(EngineConfig(gpu_memory_utilization=0.9), cpu)
