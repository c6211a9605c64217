"""`kvbench simulate`'s pieces: GPU presets, the roofline cost model, the simulated engine.

The PagedAttention finding (Kwon et al., SOSP 2023): reservation-based allocation keeps a
small share of held KV memory as token state, paged allocation over 90%, and paged +
continuous batching serves more at a request rate where contiguous saturates.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import replace

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.layout import KVLayout
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import GPU_PRESETS, GPUSpec
from kvbench.simulator.simulated_executor import SimulatedClock, SimulatedExecutor
from kvbench.simulator.step_time import StepTimeConstants, StepTimeModel
from kvbench.sizing.vllm_startup import VllmFlags, vllm_startup
from kvbench.workloads import load_workload

GiB = 2**30

# A model with round numbers, to check the arithmetic by hand.
SMALL = ModelConfig(
    name="hand",
    vocab_size=100,
    hidden_size=8,
    intermediate_size=16,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    max_position_embeddings=64,
)
# Round constants, to check the per-operation arithmetic by hand.
ROUND_CONSTANTS = StepTimeConstants(
    gemm_peak_efficiency=0.5,
    gemm_half_tokens=0.0,
    gemm_bandwidth_efficiency=1.0,
    gemm_launch_s=0.0,
    attn_decode_bandwidth_efficiency=1.0,
    attn_decode_floor_s=0.0,
    attn_decode_per_seq_s=0.0,
    attn_prefill_efficiency=1.0,
    attn_prefill_floor_s=0.0,
    attn_prefill_per_token_s=0.0,
    elementwise_bandwidth_efficiency=1.0,
    elementwise_floor_s=0.0,
    cpu_overhead_s=0.25,
)
ROUND_GPU = GPUSpec("round", "hand-computable", 10 * GiB, 1e4, 1e3, ROUND_CONSTANTS)


# GPU presets ------------------------------------------------------------------------------


def test_gpu_presets_hold_datasheet_figures():
    assert set(GPU_PRESETS) == {"a100-40gb", "a100-80gb", "h100-80gb", "h200", "l4", "rtx-4090",
                                "b200", "mi300x", "h20", "l40s", "a10g", "t4", "rtx-3090",
                                "gh200"}
    a100 = get_gpu("a100-40gb")
    assert (a100.memory_bytes, a100.peak_bf16_flops, a100.hbm_bandwidth_bytes_s) == (
        40 * GiB,
        312e12,
        1555e9,
    )
    assert get_gpu("a100-80gb").hbm_bandwidth_bytes_s == 2039e9
    assert get_gpu("h100-80gb").peak_bf16_flops == 989e12
    h200 = get_gpu("h200")
    assert (h200.memory_bytes, h200.hbm_bandwidth_bytes_s) == (141 * GiB, 4.8e12)
    assert get_gpu("l4").peak_bf16_flops == 121e12
    assert get_gpu("rtx-4090").peak_bf16_flops == pytest.approx(165.2e12)
    # float32 weights run as TF32, half the bf16 rate
    assert a100.peak_flops(4) == 156e12 and a100.peak_flops(2) == 312e12
    assert a100.to_dict()["validated"] is False
    assert get_gpu("a100-80gb").to_dict()["validated"] is True
    assert get_gpu("h100-80gb").interconnect.name == "nvlink4"
    with pytest.raises(KvbenchInputError, match="unknown --gpu 'v100'"):
        get_gpu("v100")


@pytest.mark.parametrize(("name", "memory_gib", "bf16_t", "fp8_t", "bandwidth_tb_s", "link"), [
    ("b200", 180, 2250, 4500, 8.0, "nvlink5"),  # DGX/HGX B200 datasheets, dense = sparse / 2
    ("mi300x", 192, 1307.4, 2614.9, 5.3, "infinity-fabric"),  # AMD MI300X data sheet
    ("h20", 96, 148, 296, 4.0, "nvlink4"),  # NVIDIA H20 product brief
])
def test_2026_presets_hold_their_datasheet_figures_and_say_they_are_not_calibrated(
        name, memory_gib, bf16_t, fp8_t, bandwidth_tb_s, link):
    gpu = get_gpu(name)
    assert gpu.memory_bytes == memory_gib * GiB
    assert gpu.peak_flops(2) == pytest.approx(bf16_t * 1e12)
    assert gpu.peak_flops(1) == pytest.approx(fp8_t * 1e12)
    assert gpu.hbm_bandwidth_bytes_s == pytest.approx(bandwidth_tb_s * 1e12)
    assert gpu.interconnect.name == link
    assert gpu.to_dict()["validated"] is False


def test_2026_presets_run_in_estimate_and_simulate(tmp_path, capsys):
    from kvbench.cli import main

    assert main(["estimate", "--model", "llama-3-70b", "--gpu", "b200", "-tp", "2",
                 "--step", "decode:32x1024", "--json"]) == 0
    assert "b200" in capsys.readouterr().out
    assert main(["simulate", "--model", "llama-3-8b", "--gpu", "mi300x", "--num-requests", "8",
                 "--quiet", "--out", str(tmp_path)]) == 0
    (summary,) = tmp_path.rglob("kvbench_summary.json")
    assert "mi300x" in summary.read_text()


def test_sustained_compute_fraction_slows_flop_bound_work_only():
    """The fraction scales the FLOP rate: a large prefill's matmuls and attention take 1 / f
    times as long, a one-token decode's weight-bound matmuls not at all."""
    full = GPU_PRESETS["a100-80gb"]
    half = replace(full, constants=replace(full.constants, sustained_compute_fraction=0.5))
    model = get_preset("llama-2-7b")
    at_full, at_half = (StepTimeModel(model, gpu, 2, 2) for gpu in (full, half))
    launches = 4 * model.num_layers * full.constants.gemm_launch_s
    prefill = [p.cost([4096], [4096], 1).parts for p in (at_full, at_half)]
    assert prefill[1]["gemm"] - launches == pytest.approx(2 * (prefill[0]["gemm"] - launches))
    assert prefill[1]["attention_prefill"] > 1.5 * prefill[0]["attention_prefill"]
    decode = [p.cost([1], [1024], 1).parts for p in (at_full, at_half)]
    assert decode[1]["gemm"] == decode[0]["gemm"]
    with pytest.raises(KvbenchInputError, match="sustained_compute_fraction"):
        StepTimeConstants(sustained_compute_fraction=0.0)


# Cost model -------------------------------------------------------------------------------


def test_step_time_matches_hand_computation():
    # Matmuls per layer: QKV 8x16, O 8x8, gate+up 8x32, down 16x8: 512 weights.
    cm = StepTimeModel(SMALL, ROUND_GPU, weight_element_bytes=2, kv_element_bytes=2)
    assert cm.kv_bytes_per_token == 2 * 2 * 1 * 4 * 2 == 32
    assert sum(k * n for k, n in cm.layer_gemms) == 128 + 64 + 256 + 128
    # One decode at length 5: each matmul is weight-bound (2 FLOPs per weight at 5,000
    # FLOP/s vs 2 B per weight at 1,000 B/s: compute 4e-4 s, memory 2e-3 s per weight).
    cost = cm.cost([1], [5], 1)
    gemm_layer = sum((k * n * 2 + (k + n) * 2) / 1e3 for k, n in cm.layer_gemms)
    assert cost.parts["gemm"] == pytest.approx(2 * gemm_layer)
    # Attention reads the 5 tokens' KV of each layer (16 B a layer) once; the new token's KV
    # is written once by kv_write, not counted again.
    assert cost.parts["attention_decode"] == pytest.approx(2 * 5 * 16 / 1e3)
    assert cost.parts["kv_write"] == pytest.approx(2 * 1 * 16 / 1e3)
    assert cost.parts["all_reduce"] == 0.0
    assert cost.parts["cpu_overhead"] == 0.25
    assert cost.time_s == pytest.approx(sum(cost.parts.values()))
    # Copies (fork / copy-on-write) are a read and a write of every layer's KV.
    copied = cm.cost([1], [5], 1, num_copied_slots=3)
    assert copied.parts["kv_copy"] == pytest.approx(2 * 3 * 32 / 1e3)


def test_tensor_parallel_splits_work_and_adds_all_reduce():
    model = get_preset("llama-2-70b")
    one = StepTimeModel(model, get_gpu("h100-80gb"), 2, 2, 1)
    four = StepTimeModel(model, get_gpu("h100-80gb"), 2, 2, 4)
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4, rel=1e-3)
    assert four.kv_bytes_per_token * 4 == one.kv_bytes_per_token
    d1, d4 = one.cost([1] * 32, [1000] * 32, 32), four.cost([1] * 32, [1000] * 32, 32)
    assert d1.parts["all_reduce"] == 0 and d4.parts["all_reduce"] > 0
    assert d4.parts["gemm"] < d1.parts["gemm"] / 3
    link = get_gpu("h100-80gb").interconnect
    # ring: a call, 2 (N-1)/N x bytes / bandwidth, 2 (N-1) hops; twice per layer
    per = (link.call_latency_s + 2 * 3 / 4 * 32 * 8192 * 2 / link.bandwidth_bytes_s
           + 6 * link.hop_latency_s)
    assert d4.parts["all_reduce"] == pytest.approx(80 * 2 * per)
    with pytest.raises(KvbenchInputError, match="does not divide"):
        StepTimeModel(model, get_gpu("h100-80gb"), 2, 2, 3)


def test_step_time_grows_with_batch_and_context_and_prefill_is_compute_bound():
    model = get_preset("llama-2-13b")
    cm = StepTimeModel(model, get_gpu("a100-40gb"), 2, 2)
    prefill = cm.cost([2048], [2048], 1)
    assert prefill.compute_bound and not cm.cost([1] * 32, [600] * 32, 32).compute_bound
    times = [cm.cost([1] * b, [ctx] * b, b).time_s for b, ctx in ((1, 512), (32, 512), (32, 2048))]
    assert times[0] < times[1] < times[2]
    assert 0.02 < times[1] < 0.05  # ~26 GB of weights at ~1.2 TB/s, plus KV and overhead


def test_executor_advances_the_clock_and_returns_cheap_logits():
    clock = SimulatedClock()
    cm = StepTimeModel(SMALL, ROUND_GPU, 2, 2)
    executor = SimulatedExecutor(cm, clock)
    layout = KVLayout(kind="paged", query_lens=[3, 1], seq_lens=[3, 5])
    batch = StepBatch(
        input_ids=[1, 2, 3, 4],
        positions=[0, 1, 2, 4],
        layout=layout,
        num_prefill_seqs=1,
        sample_rows=[2, 3],
    )
    logits = executor.execute(batch)
    assert logits.shape == (2, 1) and logits.dtype == torch.float32
    assert logits.argmax(-1).tolist() == [0, 0]
    assert clock() == pytest.approx(cm.cost([3, 1], [3, 5], 2).time_s)
    assert executor.stats()["steps"] == 1
    big = StepBatch(
        list(range(300)),
        list(range(300)),
        KVLayout(kind="paged", query_lens=[1] * 300, seq_lens=[1] * 300),
        0,
        list(range(300)),
    )
    assert executor.execute(big).shape == (300, 1)
    assert executor.advance(big) == 300  # the rows to sample, no logits built
    assert executor.stats()["steps"] == 3


def test_simulated_sampling_needs_no_token_inputs_and_answers_every_key():
    clock = SimulatedClock()
    cm = StepTimeModel(SMALL, ROUND_GPU, 2, 2)
    executor = SimulatedExecutor(cm, clock)
    assert not executor.reads_token_inputs
    batch = StepBatch([], [], KVLayout(kind="paged", query_lens=[3, 1], seq_lens=[3, 5]), 1,
                      [2, 3], num_tokens=4)
    keys = [((7, 0, 3), (7, 1, 3), (7, 2, 3)), ((8, 0, 5),)]  # request 7 forks two siblings
    tokens = executor.execute_and_sample(batch, SamplingParams(0.0, 0, keys))
    assert tokens == [[0, 0, 0], [0]]
    assert executor.execute_and_sample(batch, SamplingParams(0.0, 0, [keys[1]] * 2)) == [[0]] * 2
    assert clock() == pytest.approx(2 * cm.cost([3, 1], [3, 5], 2).time_s)


def test_engine_steps_without_token_inputs_count_their_tokens():
    built = build_engine(EngineConfig(model="llama-2-7b", dtype="bfloat16", kv_memory="4GiB"), SimulatedExecutors("h100-80gb"))
    engine = built.engine
    seen = []
    advance = engine.executor.advance

    def spy(batch, *unlisted_decodes):
        seen.append(batch)
        return advance(batch, *unlisted_decodes)

    engine.executor.advance = spy
    for request in _sharegpt(6, built):
        engine.add_request(request)
    engine.run_to_completion()
    assert all(b.input_ids == [] and b.positions == [] for b in seen)
    assert [b.num_tokens for b in seen] == [s.num_batched_tokens for s in engine.steps]
    assert [b.num_tokens for b in seen] == [sum(b.layout.query_lens) for b in seen]
    assert engine.step_recorder.num_steps == len(engine.steps)
    assert engine.step_recorder.last is engine.steps[-1]


def test_clock_moves_only_forward():
    clock = SimulatedClock(1.0)
    clock.advance(0.5)
    clock.sleep_until(1.2)  # in the past: no-op
    assert clock() == 1.5
    clock.sleep_until(3.0)
    clock.advance(1.0)
    assert clock() == 4.0
    with pytest.raises(ValueError):
        clock.advance(-1.0)


# Builder ----------------------------------------------------------------------------------


def test_budget_follows_gpu_memory_utilization():
    model = get_preset("llama-2-13b")
    built = build_engine(EngineConfig(model="llama-2-13b", dtype="bfloat16"), SimulatedExecutors("a100-40gb"))
    # the budget vLLM would have on that GPU at the same flags (docs/estimate.md)
    flags = VllmFlags(max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=4096)
    startup = vllm_startup(model, get_gpu("a100-40gb").reported_memory_bytes, flags,
                           gpu_name="NVIDIA A100 SXM4 40GB")
    stage = startup.stages[0]
    assert stage.requested == math.floor(get_gpu("a100-40gb").reported_memory_bytes * 0.92)
    assert built.kv_budget_bytes == stage.available == (
        stage.requested - stage.weights - stage.activation - stage.non_torch - stage.cuda_graphs)
    assert built.bytes_per_slot == 2 * 40 * 40 * 128 * 2 == 819200
    assert built.backend == "simulated" and built.device.type == "meta"
    assert built.engine.strategy.capacity_tokens == built.kv_budget_bytes // 819200 // 16 * 16
    assert isinstance(built.engine.clock, SimulatedClock)

    half = build_engine(EngineConfig(model="llama-2-13b", dtype="bfloat16", gpu_memory_utilization=0.8), SimulatedExecutors("a100-40gb"))
    assert half.kv_budget_bytes == built.kv_budget_bytes - (
        stage.requested - math.floor(get_gpu("a100-40gb").reported_memory_bytes * 0.8))

    fixed = build_engine(EngineConfig(model="llama-2-13b", dtype="bfloat16", kv_memory="2GiB", kv_cache_dtype="fp8"), SimulatedExecutors("h100-80gb"))
    assert fixed.kv_budget_bytes == 2 * GiB
    assert fixed.bytes_per_slot == 819200 // 2
    fp8 = build_engine(EngineConfig(model="llama-2-13b", dtype="bfloat16", strategy="fp8"), SimulatedExecutors("a100-40gb"))
    assert fp8.bytes_per_slot == 819200 // 2  # the fp8 strategy implies an fp8 KV cache
    assert fp8.kv_budget_bytes == built.kv_budget_bytes  # same budget, twice the tokens

    with pytest.raises(KvbenchInputError, match="on a100-40gb: No available memory for the cache"):
        # float32 weights of a 13B model (52 GB) do not fit
        build_engine(EngineConfig(model="llama-2-13b", dtype="float32"), SimulatedExecutors("a100-40gb"))
    with pytest.raises(KvbenchInputError, match="unknown --gpu"):
        build_engine(EngineConfig(model="llama-2-13b"), SimulatedExecutors("tpu"))


def test_simulated_steps_take_modelled_time_only():
    built = build_engine(EngineConfig(model="llama-2-7b", dtype="bfloat16", kv_memory="4GiB"), SimulatedExecutors("h100-80gb"))
    engine = built.engine
    for request in _sharegpt(20, built):
        engine.add_request(request)
    engine.run_to_completion()
    busy = engine.executor.stats()["busy_s"]
    assert engine.clock() == pytest.approx(busy)
    assert sum(s.step_ms for s in engine.steps) == pytest.approx(busy * 1e3)
    assert all(s.overhead_ms == pytest.approx(0.0, abs=1e-9) for s in engine.steps)
    assert engine.strategy.is_whole()


@pytest.mark.parametrize(
    "options",
    [
        dict(strategy="paged", batching="static"),
        dict(strategy="contiguous", batching="static", reserve="pow2"),
        dict(strategy="paged", chunked_prefill=True, max_num_batched_tokens=512),
        dict(strategy="paged", kv_cache_dtype="fp8"),
        dict(strategy="fp8"),
        dict(strategy="prefix"),
        dict(strategy="prefix", batching="vllm-v1", max_num_batched_tokens=256),
    ],
)
def test_every_policy_runs_on_the_simulated_clock(options):
    config = EngineConfig(model="llama-2-7b", dtype="bfloat16", kv_memory="4GiB", **options)
    built = build_engine(config, SimulatedExecutors("l4"))
    engine = built.engine
    for request in _sharegpt(20, built):
        engine.add_request(request)
    engine.run_to_completion()
    assert all(s.finish_s is not None for g in engine.sequences.values() for s in g)
    assert engine.clock() == pytest.approx(engine.executor.stats()["busy_s"])
    assert engine.strategy.is_whole()


# The PagedAttention finding -----------------------------------------------------------------


def _sharegpt(n, built, rate=math.inf):
    return load_workload(
        "sharegpt",
        n,
        seed=0,
        vocab_size=built.model_config.vocab_size,
        max_model_len=built.max_model_len,
        request_rate=rate,
    ).requests


def simulate(strategy, n, rate=math.inf, gpu="a100-40gb", **options):
    """Drive the engine on the simulated clock: arrivals join as the clock passes them."""
    config = EngineConfig(model="llama-2-13b", strategy=strategy, dtype="bfloat16", **options)
    built = build_engine(config, SimulatedExecutors(gpu))
    engine, clock = built.engine, built.engine.clock
    pending = deque(_sharegpt(n, built, rate))
    requests = list(pending)
    while pending or engine.has_unfinished():
        while pending and pending[0].arrival_s <= clock():
            engine.add_request(pending.popleft())
        if not engine.has_unfinished():
            clock.sleep_until(pending[0].arrival_s)
            continue
        engine.step()
    engine.drain()
    finish = max(s.finish_s for group in engine.sequences.values() for s in group)
    steps = [s for s in engine.steps if s.kv_utilization is not None]
    weight = sum(s.step_ms for s in steps)
    return {
        "util_mean": sum(s.kv_utilization for s in steps) / len(steps),
        "util_time": sum(s.kv_utilization * s.step_ms for s in steps) / weight,
        "output_tok_s": sum(r.output_len for r in requests) / (finish - requests[0].arrival_s),
        "max_waiting": max(s.num_waiting for s in engine.steps),
        "engine": engine,
    }


def test_reservation_wastes_kv_memory_and_paging_does_not():
    contiguous = simulate("contiguous", 150, reserve="max")
    paged = simulate("paged", 150)
    assert contiguous["util_mean"] < 0.45 and contiguous["util_time"] < 0.45
    assert paged["util_mean"] > 0.9 and paged["util_time"] > 0.9
    assert paged["output_tok_s"] > contiguous["output_tok_s"]
    assert paged["engine"].strategy.is_whole() and contiguous["engine"].strategy.is_whole()


def test_paged_continuous_keeps_up_where_contiguous_saturates():
    # 1 request/s: contiguous (max) fits 3 llama-2-13b requests in an A100 40GB's KV budget
    # and falls behind (its queue grows); paged holds ~30 and keeps up with arrivals.
    contiguous = simulate("contiguous", 120, rate=1.0, reserve="max")
    paged = simulate("paged", 120, rate=1.0)
    assert contiguous["max_waiting"] > 50
    assert paged["max_waiting"] < contiguous["max_waiting"] / 4
    assert paged["output_tok_s"] > 2 * contiguous["output_tok_s"]


def test_tensor_parallel_engine_runs_and_kv_follows_per_gpu_memory():
    """llama-3-70b does not fit one H100 in bf16; four hold a weight shard and KV each."""
    config = EngineConfig(model="llama-3-70b", dtype="bfloat16")
    with pytest.raises(KvbenchInputError):
        build_engine(config, SimulatedExecutors("h100-80gb"))
    built = build_engine(replace(config, tensor_parallel_size=4), SimulatedExecutors("h100-80gb"))
    model = get_preset("llama-3-70b")
    startup = vllm_startup(model, get_gpu("h100-80gb").reported_memory_bytes, VllmFlags(
        max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192,
        tensor_parallel_size=4), gpu_name="NVIDIA H100 SXM5 80GB")
    stage = startup.stages[0]
    assert stage.weights == pytest.approx(model.num_parameters() * 2 / 4, rel=1e-3)
    assert built.kv_budget_bytes == 4 * stage.available  # each GPU's, the group's
    per_token_per_gpu = model.kv_bytes_per_token(2) // 4
    assert built.engine.strategy.capacity_tokens // 16 == (
        stage.available // per_token_per_gpu // 16)
    engine = built.engine
    for request in _sharegpt(10, built):
        engine.add_request(request)
    engine.run_to_completion()
    assert engine.clock() == pytest.approx(engine.executor.stats()["busy_s"])
    assert engine.executor.last_cost.parts["all_reduce"] > 0


def test_a_kv_budget_beyond_the_gpus_memory_is_refused(tmp_path, capsys):
    from kvbench.cli import main

    args = ["simulate", "--model", "llama-2-13b", "--gpu", "h100-80gb", "--num-requests", "4",
            "--quiet", "--out", str(tmp_path / "out")]
    assert main([*args, "--kv-memory", "1TiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--kv-memory 1.00 TiB is more than the memory of h100-80gb (79.19 GiB)" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    # two GPUs hold twice as much; a budget within the memory runs
    assert main([*args, "--kv-memory", "100GiB", "--tensor-parallel-size", "2"]) == 0
    assert main([*args, "--kv-memory", "60GiB"]) == 0


def test_async_scheduling_hides_the_cpu_overhead_behind_the_previous_step(tmp_path):
    """vLLM prepares step n+1 while step n runs: under async scheduling a lone request's
    decode steps (each longer on the GPU than the 1 ms overhead) are charged no CPU time,
    while its first step, after an idle GPU, is charged it whole; without async every step
    pays it."""
    from kvbench.cli import main

    base = ["simulate", "--workload", "uniform", "--model", "tests/simulator/published_data/"
            "qwen2.5-0.5b-instruct", "--gpu", "l4", "--workload-param", "prompt_len=256",
            "--workload-param", "output_len=32", "--num-requests", "3", "--max-concurrency",
            "1", "--quiet", "--warmup", "0"]
    summaries = {}
    for flag in ("--async-scheduling", "--no-async-scheduling"):
        out = tmp_path / flag
        assert main([*base, flag, "--out", str(out)]) == 0
        summaries[flag] = json.loads(next(out.rglob("kvbench_summary.json")).read_text())
    on, off = (summaries[f]["latency_ms"] for f in ("--async-scheduling",
                                                    "--no-async-scheduling"))
    assert off["tpot"]["p50"] - on["tpot"]["p50"] == pytest.approx(1.0, abs=1e-6)
    assert on["ttft"]["p50"] == pytest.approx(off["ttft"]["p50"], abs=1e-6)
