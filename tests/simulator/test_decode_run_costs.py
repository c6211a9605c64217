"""`StepTimeModel.decode_run_costs` (the fast-forward's cost of a run of decode steps)
against `cost` of each step, called once a step, added up as the executor adds it: every figure
equal to the bit, for dense, mixture-of-experts and latent-attention models, one GPU and
tensor-parallel groups, with and without a per-layer floor, with the CPU overhead charged
whole and overlapped with the previous step's GPU time (async scheduling). And a mixed
step's `cost` with its decode cohort given by count and lengths' sum against the same step
with every row listed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import StepTimeModel, overlapped_cpu_overhead_s


def _stepped(model: StepTimeModel, num_seqs: int, context: int, max_steps: int,
             start_s: float, until_s: float, sums: tuple[float, float, float],
             overlap_after_gpu_s: float | None = None):
    now_s, (busy, flops, moved) = start_s, sums
    ends, bound, cost = [], 0, None
    for step in range(max_steps):
        if step and now_s >= until_s:
            break
        cost = model.cost([], [], num_seqs, 0, num_seqs, context)
        if overlap_after_gpu_s is not None:
            cpu = overlapped_cpu_overhead_s(model.gpu.constants.cpu_overhead_s,
                                            overlap_after_gpu_s)
            overlap_after_gpu_s = cost.gpu_s
            cost = cost.with_cpu_overhead(cpu)
        now_s += cost.time_s
        ends.append(now_s)
        busy += cost.time_s
        flops += cost.flops
        moved += cost.bytes
        bound += cost.compute_bound
        context += num_seqs
    return ends, (busy, flops, moved), bound, cost


@pytest.mark.parametrize("name,gpu,tp", [("llama-2-13b", "a100-40gb", 1),
                                         ("llama-3-8b", "h100-80gb", 1),
                                         ("llama-2-70b", "h100-80gb", 4),
                                         ("mixtral-8x7b", "h100-80gb", 2), ("qwen3-8b", "h100-80gb", 1),
                                         ("deepseek-v3", "h100-80gb", 8)])
@settings(max_examples=40, deadline=None)
@given(num_seqs=st.integers(1, 300), context=st.integers(1, 200_000),
       max_steps=st.integers(0, 40), start_s=st.floats(0, 1e5),
       until=st.floats(0, 2.0), floor_us=st.sampled_from([0.0, 50.0, 400.0]),
       cpu_ms=st.sampled_from([1.0, 30.0]),
       overlap_after_gpu_s=st.one_of(st.none(), st.floats(0, 0.05)))
def test_a_decode_run_costs_what_its_steps_cost_one_by_one(
        name, gpu, tp, num_seqs, context, max_steps, start_s, until, floor_us, cpu_ms,
        overlap_after_gpu_s):
    spec = get_gpu(gpu)
    spec = replace(spec, constants=replace(spec.constants, layer_floor_s=floor_us * 1e-6,
                                           cpu_overhead_s=cpu_ms * 1e-3))
    model = StepTimeModel(get_preset(name), spec, 2, 2, tp)
    sums = (start_s / 3, start_s * 1e12, start_s * 1e9)
    until_s = start_s + until
    got = model.decode_run_costs(num_seqs, context, max_steps, start_s, until_s, sums,
                                 overlap_after_gpu_s)
    expected = _stepped(model, num_seqs, context, max_steps, start_s, until_s, sums,
                        overlap_after_gpu_s)
    assert got[:3] == expected[:3]
    if expected[3] is not None:
        last, want = got[3], expected[3]
        assert (last.time_s, last.flops, last.bytes, last.compute_bound, last.parts) == (
            want.time_s, want.flops, want.bytes, want.compute_bound, want.parts)


@pytest.mark.parametrize("name,gpu,tp", [("llama-3-8b", "h100-80gb", 1),
                                         ("mixtral-8x7b", "h100-80gb", 2),
                                         ("deepseek-v3", "h100-80gb", 8)])
@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 600), st.integers(0, 8000)), max_size=4),
       members=st.lists(st.integers(2, 20_000), min_size=1, max_size=300),
       floor_us=st.sampled_from([0.0, 50.0, 400.0]), copied=st.integers(0, 64),
       data=st.data())
def test_a_mixed_step_costs_its_cohort_by_sums_as_by_rows(
        name, gpu, tp, rows, members, floor_us, copied, data):
    """The fast-forward's mixed step (`SimulatedExecutor.execute_mixed_step`): the prompts'
    rows listed, the cohort's decodes by their count and lengths' sum, placed anywhere among
    the rows when listed: the same `StepTime` to the bit."""
    spec = get_gpu(gpu)
    spec = replace(spec, constants=replace(spec.constants, layer_floor_s=floor_us * 1e-6))
    model = StepTimeModel(get_preset(name), spec, 2, 2, tp)
    query_lens = [q for q, _ in rows]
    seq_lens = [q + done for q, done in rows]
    sampling = sum(1 for q in query_lens if q) + len(members)
    at = data.draw(st.integers(0, len(rows)))
    listed = model.cost([*query_lens[:at], *[1] * len(members), *query_lens[at:]],
                        [*seq_lens[:at], *members, *seq_lens[at:]], sampling, copied)
    by_sums = model.cost(query_lens, seq_lens, sampling, copied, len(members), sum(members))
    assert (by_sums.time_s, by_sums.flops, by_sums.bytes, by_sums.compute_bound,
            by_sums.parts) == (listed.time_s, listed.flops, listed.bytes,
                               listed.compute_bound, listed.parts)


def test_a_windowed_model_cannot_cost_decodes_by_sums():
    """A sliding window charges each decode for min(length, window): a sum cannot say that
    (its executor does not take part in fast-forward)."""
    model = StepTimeModel(get_preset("gemma-2-27b"), get_gpu("h100-80gb"), 2, 2, 1)
    assert model.has_windows
    with pytest.raises(ValueError, match="window"):
        model.cost([5], [5], 2, 0, 1, 100)
