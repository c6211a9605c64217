"""Metrics on hand-built event logs with known answers."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.metrics import goodput, latency_stats, throughput
from kvbench.results.request_table import RequestTable
from kvbench.results.token_file import write_token_file
from tests.results.memory_reference import memory_summary
from tests.results.token_steps import add_token_times


def request_rows(requests: list[Request], samples: dict) -> pd.DataFrame:
    return RequestTable.build(requests, samples).frame()


def inter_token_latencies_ms(requests: list[Request], samples: dict) -> list[float]:
    """The summary's ITLs (ms) of the run, from the pass that writes its token file, sorted."""
    return sorted(write_token_file(io.BytesIO(), requests, samples).itl_ms.expand().tolist())


def finished(request: Request, admitted: float, times: list[float]) -> Sequence:
    seq = Sequence(request.request_id, request, 0, list(request.prompt_token_ids))
    seq.admitted_s = admitted
    for _ in times:
        seq.token_ids.append(0)
    add_token_times(seq, times)
    seq.first_token_s = times[0]
    seq.finish_s = times[-1]
    return seq


def test_ttft_tpot_itl_e2e_from_token_times():
    r0 = Request(0, arrival_s=1.0, prompt_token_ids=(1, 2, 3), output_len=4)
    r1 = Request(1, arrival_s=2.0, prompt_token_ids=(1,), output_len=2)
    samples = {
        0: [finished(r0, admitted=1.5, times=[2.0, 2.1, 2.3, 2.6])],
        1: [finished(r1, admitted=2.0, times=[2.5, 3.5])],
    }
    rows = request_rows([r0, r1], samples).set_index("request_id")
    assert rows.loc[0, "queue_ms"] == pytest.approx(500)
    assert rows.loc[0, "prefill_ms"] == pytest.approx(500)
    assert rows.loc[0, "ttft_ms"] == pytest.approx(1000)
    assert rows.loc[0, "tpot_ms"] == pytest.approx(200)  # (2.6 - 2.0) / 3
    assert rows.loc[0, "e2e_ms"] == pytest.approx(1600)
    assert rows.loc[1, "tpot_ms"] == pytest.approx(1000)
    assert inter_token_latencies_ms([r0, r1], samples) == pytest.approx([100, 200, 300, 1000])
    tput, makespan = throughput(rows.reset_index())
    assert makespan == pytest.approx(2.5)  # first arrival 1.0 to last finish 3.5
    assert tput["output_tok_s"] == pytest.approx(6 / 2.5)
    assert tput["total_tok_s"] == pytest.approx(10 / 2.5)
    assert tput["requests_s"] == pytest.approx(2 / 2.5)


def test_percentiles_interpolate_like_numpy():
    stats = latency_stats([10, 20, 30, 40, 50])
    assert stats == {"mean": 30, "p50": 30, "p90": 46, "p99": pytest.approx(49.6), "max": 50}
    assert latency_stats([])["p99"] is None


def test_time_weighted_utilization_and_saturated_steps():
    steps = pd.DataFrame(
        {
            "t_s": [0.0, 1.0, 4.0],
            "step_ms": [1000.0, 1000.0, 1000.0],
            "kv_token_bytes": [50, 90, 0],
            "kv_reserved_bytes": [50, 10, 0],
            "kv_internal_bytes": [0, 0, 0],
            "kv_external_bytes": [0, 0, 0],
            "kv_free_bytes": [100, 100, 200],
            "kv_cached_bytes": [0, 0, 0],
            "num_waiting": [1, 0, 0],
        }
    )
    mem = memory_summary(steps)
    # step 0 lasts 1 s at 50%, step 1 lasts 3 s at 90%; step 2 holds nothing
    assert mem["utilization_mean"] == pytest.approx((0.5 * 1 + 0.9 * 3) / 4)
    assert mem["utilization_saturated"] == pytest.approx(0.5)
    assert mem["breakdown_mean"]["free"] == pytest.approx((0.5 * 1 + 0.5 * 3 + 1.0 * 1) / 5)


def test_goodput_counts_requests_meeting_every_slo():
    df = pd.DataFrame({
        "ttft_ms": [100.0, 600.0, 200.0], "tpot_ms": [10.0, 10.0, 80.0],
        "e2e_ms": [1.0, 1.0, 1.0], "completed": [True, True, True],
    })
    result = goodput(df, {"ttft": 500, "tpot": 50}, makespan_s=2.0)
    assert result["requests_meeting_slo"] == 1
    assert result["fraction_meeting_slo"] == pytest.approx(1 / 3)
    assert result["goodput_requests_s"] == pytest.approx(0.5)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.integers(1, 5), st.floats(0.01, 2)),
                min_size=1, max_size=12))
def test_makespan_times_throughput_is_tokens(specs):
    requests, samples = [], {}
    for i, (arrival, out_len, gap) in enumerate(specs):
        r = Request(i, arrival, (1, 2), out_len)
        requests.append(r)
        samples[i] = [finished(r, arrival, [arrival + gap * (k + 1) for k in range(out_len)])]
    df = request_rows(requests, samples)
    tput, makespan = throughput(df)
    assert tput["output_tok_s"] * makespan == pytest.approx(sum(s[1] for s in specs))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.lists(st.floats(0, 1e4), max_size=6), min_size=1, max_size=3),
                max_size=5))
def test_itl_pools_each_samples_gaps_in_order(times_per_request):
    """Exactly the per-token gaps in ms, sample by sample; none across samples or requests."""
    samples, requests = {}, []
    for i, sample_times in enumerate(times_per_request):
        request = Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=6,
                          n=len(sample_times))
        requests.append(request)
        samples[i] = []
        for k, times in enumerate(sample_times):
            seq = Sequence(i * 10 + k, request, k, [1])
            add_token_times(seq, times)
            samples[i].append(seq)
    expected = [(b - a) * 1e3 for sample_times in times_per_request for times in sample_times
                for a, b in zip(times, times[1:], strict=False)]
    assert inter_token_latencies_ms(requests, samples) == sorted(expected)


def test_latency_stats_consuming_its_array_gives_the_same_figures():
    """The summary lets `latency_stats` partition a run's ITL array in place rather than
    copy it: the figures must be those of the copying call, to the bit."""
    import numpy as np

    values = np.random.default_rng(4).lognormal(3.0, 1.0, 10_001)
    values[[5, 77]] = np.nan
    original = values.copy()
    expected = latency_stats(original)
    assert latency_stats(original.tolist()) == expected
    assert latency_stats(values, consume=True) == expected
