"""SLO capacity search on the simulator against a case solved by hand.

The case: `uniform` workload (every request P = 64 prompt and O = 16 output tokens),
llama-2-7b on a simulated a100-80gb, `--max-num-seqs 1` so exactly one request is served at a
time. Each request then costs the same service time

    S = cost(prefill of P tokens) + sum_{k=1}^{O-1} cost(decode at context P + k)

(the prefill step samples the first token, each decode step one more), computed here from
`StepTimeModel` directly. Arrivals are gamma with burstiness 1e6: gaps of 1/R with a
coefficient of variation of 1e-3, i.e. practically evenly spaced.

A single server with constant service time S and arrivals every 1/R: when R <= 1/S nobody
waits and every e2e latency is S. When R > 1/S the queue grows by S - 1/R per request, so
request i (i = 0..N-1) finishes after e2e_i = S + i (S - 1/R), and numpy's p99 of those N
values (linear interpolation, position 0.99 (N-1)) is

    e2e.p99 = S + 0.99 (N - 1) (S - 1/R).

With the SLO e2e.p99 <= k S, the capacity is the R where that equals k S:

    R* = 1 / (S (1 - (k - 1) / (0.99 (N - 1)))).

With N = 40 and k = 2: R* = 1.0266 / S. The gap jitter moves R* by ~1e-4 relative, far inside
the search tolerance (2%), so the bisection's bracket [lo, hi) must hold R*.
"""

from __future__ import annotations

import math

import pytest

from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sweep import SearchSpec, SweepSpec, run_sweep
from kvbench.sweep.capacity import ABOVE, BELOW, Bisection

PROMPT, OUTPUT, N, K = 64, 16, 40, 2.0
TOLERANCE = 0.02


def service_time_s() -> float:
    model = StepTimeModel(get_preset("llama-2-7b"), get_gpu("a100-80gb"), 2, 2)
    prefill = model.cost([PROMPT], [PROMPT], 1).time_s
    decodes = sum(model.cost([1], [PROMPT + k], 1).time_s for k in range(1, OUTPUT))
    return prefill + decodes


def closed_form_capacity(s: float) -> float:
    return 1.0 / (s * (1.0 - (K - 1.0) / (0.99 * (N - 1))))


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def test_capacity_search_finds_the_closed_form_saturation_rate(tmp_path):
    s = service_time_s()
    expected = closed_form_capacity(s)
    spec = SweepSpec(
        kind="simulate",
        base={"model": "llama-2-7b", "gpu": "a100-80gb", "workload": "uniform",
              "workload-param": [f"prompt_len={PROMPT}", f"output_len={OUTPUT}"],
              "num-requests": N, "warmup": 0, "max-num-seqs": 1, "burstiness": 1e6,
              "frontend-latency-ms": 0,  # the closed form is the engine's: no server
              # and every step pays its CPU overhead (async scheduling would hide it)
              "async-scheduling": False},
        axes={"strategy": ["paged"]},
        slo={"e2e.p99": K * s * 1e3},
        search=SearchSpec("request-rate", lo=_sig(0.25 / s), hi=_sig(4.0 / s),
                          tolerance=TOLERANCE),
        out=str(tmp_path), name="cf",
    )
    result = run_sweep(spec, write_report=False)
    row = result.capacity.iloc[0]
    assert row["status"] == "bracketed"
    lo, hi = row["lo"], row["hi"]
    assert hi <= lo * (1 + TOLERANCE) + 1e-12
    assert lo <= expected * (1 + 1e-3) and expected * (1 - 1e-3) <= hi
    assert row["capacity"] == pytest.approx(expected, rel=TOLERANCE)
    # Below capacity nobody waits: the probe at the low end of the range served every
    # request in exactly S.
    points = result.points.set_index("point_id")
    low = points.loc[f"strategy=paged,request_rate={spec.search.lo:g}"]
    assert low["e2e_p50_ms"] == pytest.approx(s * 1e3, rel=1e-9)
    assert low["e2e_max_ms"] == pytest.approx(s * 1e3, rel=1e-3)
    assert row["e2e_p99_ms_at_capacity"] <= K * s * 1e3


def test_bisection_brackets_within_tolerance_and_reports_the_range_ends():
    capacity = 3.3
    search = Bisection(0.5, 64.0, 0.05)
    while (value := search.next_value()) is not None:
        search.record(value, value <= capacity)
    out = search.outcome()
    assert out["lo"] <= capacity < out["hi"] <= out["lo"] * 1.05
    assert out["probes"] <= 2 + math.ceil(math.log2(math.log(128) / math.log(1.05)))

    below = Bisection(1.0, 8.0, 0.05)
    below.record(below.next_value(), False)
    assert below.next_value() is None and below.outcome()["status"] == BELOW

    above = Bisection(1.0, 8.0, 0.05)
    while (value := above.next_value()) is not None:
        above.record(value, True)
    assert above.outcome() | {"probes": 0} == {"capacity": 8.0, "status": ABOVE, "lo": 8.0,
                                               "hi": None, "probes": 0}


def test_integer_bisection_and_seeded_grid_results():
    search = Bisection(1, 64, 0.05, integer=True)
    while (value := search.next_value()) is not None:
        assert float(value).is_integer()
        search.record(value, value <= 13)
    assert (search.outcome()["lo"], search.outcome()["hi"]) == (13, 14)

    seeded = Bisection(0.05, 100.0, 0.05)
    for value, met in ((1.0, True), (2.0, True), (4.0, False)):  # grid points already run
        seeded.record(value, met)
    first = seeded.next_value()
    assert 2.0 < first < 4.0  # straight into the grid's bracket, no probe of the range ends


def test_groups_that_build_the_same_runs_are_searched_once(tmp_path):
    """`--reserve` means nothing to `paged`: paged x {max, exact} is one search, not two,
    and every probe is one folder."""
    spec = SweepSpec(
        kind="simulate",
        base={"model": "llama-2-7b", "gpu": "a100-40gb", "workload": "uniform",
              "num-requests": 16, "warmup": 0},
        axes={"strategy": ["contiguous", "paged"], "reserve": ["max", "exact"],
              "request-rate": [1, 4]},
        slo={"ttft.p99": "150ms"},
        search=SearchSpec("request-rate", tolerance=0.25),
        out=str(tmp_path), name="g",
    )
    result = run_sweep(spec, write_report=False)
    assert list(result.capacity["label"]) == [
        "contiguous-max-vllm-v1", "contiguous-exact-vllm-v1", "paged-vllm-v1"]
    points = result.points
    assert len(points) == len(set(points["point_id"]))
    assert not any("reserve=exact" in p for p in points[points["label"] == "paged"]["point_id"])
    folders = {p.name for p in (tmp_path / "g").iterdir() if p.is_dir()}
    assert folders == set(points["point_id"])


def test_max_concurrency_search_under_a_ttft_slo_finds_the_closed_form_limit(tmp_path):
    """Closed loop, offline, one request served at a time (service time S, its prefill step
    p): with C requests in flight a request sent when a slot frees waits behind the C − 1
    others, so its TTFT, counted from its send as vLLM's, is (C − 1) S + p whatever its place
    in the workload. Under ttft.p99 <= 3.5 S + p the largest C is 4. (Counting the client's
    wait in, every TTFT would be i S + p for the i-th request at any C: no limit to find.)"""
    s = service_time_s()
    model = StepTimeModel(get_preset("llama-2-7b"), get_gpu("a100-80gb"), 2, 2)
    prefill_s = model.cost([PROMPT], [PROMPT], 1).time_s
    spec = SweepSpec(
        kind="simulate",
        base={"model": "llama-2-7b", "gpu": "a100-80gb", "workload": "uniform",
              "workload-param": [f"prompt_len={PROMPT}", f"output_len={OUTPUT}"],
              "num-requests": 24, "warmup": 0, "max-num-seqs": 1,
              "frontend-latency-ms": 0,  # the closed form is the engine's: no server
              # and every step pays its CPU overhead (async scheduling would hide it)
              "async-scheduling": False},
        axes={"strategy": ["paged"]},
        slo={"ttft.p99": (3.5 * s + prefill_s) * 1e3},
        search=SearchSpec("max-concurrency", lo=1, hi=16, tolerance=0.01),
        out=str(tmp_path), name="mc",
    )
    row = run_sweep(spec, write_report=False).capacity.iloc[0]
    assert row["status"] == "bracketed"
    assert (row["lo"], row["hi"], row["capacity"]) == (4, 5, 4)
    assert row["ttft_p99_ms_at_capacity"] == pytest.approx((3 * s + prefill_s) * 1e3, rel=1e-6)
