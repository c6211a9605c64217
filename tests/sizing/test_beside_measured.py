"""`kvbench run` on CUDA prints vLLM's start-up model beside the budget it measured."""

from __future__ import annotations

from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.sizing.vllm_report import format_beside_measured
from kvbench.sizing.vllm_startup import VllmFlags, vllm_startup

GiB = 2**30


def test_each_term_measured_beside_predicted():
    total = get_gpu("h100-80gb").reported_memory_bytes
    startup = vllm_startup(get_preset("llama-3-8b"), total, VllmFlags(max_model_len=8192))
    stage = startup.stages[0]
    # a fake profile: 0.5 GiB more weights, 1 GiB of activation peak, what 0.92 leaves
    weights, activation = stage.weights + GiB // 2, GiB
    budget = int(total * 0.92) - weights - activation
    lines = format_beside_measured(startup, total, weights, activation, budget).splitlines()
    assert "vLLM 0.21" in lines[0] and lines[1].split() == ["term", "measured", "vLLM", "model"]
    table = {line[:20].strip(): line[20:].split() for line in lines[2:]}
    assert table["total memory"] == [f"{total / GiB:.2f}"] * 2
    assert table["weights"] == [f"{weights / GiB:.2f}", f"{stage.weights / GiB:.2f}"]
    assert table["peak activation"] == ["1.00", f"{stage.activation / GiB:.2f}"]
    assert table["non-torch memory"] == ["-", f"{stage.non_torch / GiB:.2f}"]
    assert table["CUDA graphs"] == ["-", f"{stage.cuda_graphs / GiB:.2f}"]
    assert table["KV budget"] == [f"{budget / GiB:.2f}", f"{stage.available / GiB:.2f}"]
