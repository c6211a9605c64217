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
    budget, terms = ModelExecutors().kv_budget(config, device, None, get_preset("tiny"), 2048)
    assert terms is None  # measured or given: no model's terms
    return budget


def test_cuda_budget_is_the_formula_over_the_measured_profile(monkeypatch, capsys):
    measured = CudaMemoryProfile(total_bytes=80 * GiB, weight_bytes=16 * GiB, activation_bytes=GiB)
    monkeypatch.setattr(model_executors, "profile_cuda_memory", lambda *_: measured)
    assert budget(EngineConfig()) == 59_055_800_320  # floor(80 GiB x 0.9) - 17 GiB
    # vLLM's start-up model printed beside the measured profile, on the same total
    printed = {line[:20].strip(): line[20:].split()
               for line in capsys.readouterr().err.splitlines()[2:]}
    assert printed["total memory"] == ["80.00", "80.00"]
    assert printed["weights"][0] == "16.00" and printed["KV budget"][0] == "55.00"
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


def test_the_memory_profile_attends_with_4d_input_and_the_memory_check_counts_it(monkeypatch):
    # SDPA's fused kernels take [batch, heads, T, D] only: 3-D input falls back to the math
    # kernel, whose [heads, T, T] scores would be taken off the KV budget on a GPU.
    import torch

    from kvbench.execution.kv_budget import profile_prefill
    from kvbench.models.loader import load_model
    from kvbench.models.memory_check import activation_bytes_estimate, memory_need

    sdpa = torch.nn.functional.scaled_dot_product_attention
    calls = []

    def recording_sdpa(q, k, v, **kwargs):
        out = sdpa(q, k, v, **kwargs)
        calls.append((q.shape, k.shape, v.shape, kwargs, k.nbytes + v.nbytes + 2 * out.nbytes))
        return out

    model, config = load_model("tiny")
    tokens = 24
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    logits = profile_prefill(model, torch.device("cpu"), tokens)
    assert logits.shape == (1, config.vocab_size)
    assert len(calls) == config.num_layers
    shape = (1, config.num_heads, tokens, config.head_dim)
    for q_shape, k_shape, v_shape, kwargs, _ in calls:
        assert q_shape == k_shape == v_shape == shape and kwargs == {"is_causal": True}
    # The up-front check counts the profile's attention buffers (repeated K/V, the output
    # and its reshaped copy) on top of the layer's other activations.
    need = memory_need(config, torch.float32, tokens, 1)
    extra = need.activation_bytes - activation_bytes_estimate(config, tokens, 1, 4)
    assert extra >= calls[0][-1]
