"""Arrival processes: offline, Poisson, gamma burstiness (vLLM's meaning), closed loop."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads import ArrivalProcess, arrival_times, load_workload
from kvbench.workloads.arrivals import apply_arrivals

N = 10_000


def gaps(times: np.ndarray) -> np.ndarray:
    return np.diff(times)


def test_offline_all_at_zero():
    assert not arrival_times(N).any()
    assert {r.arrival_s for r in load_workload("sharegpt", 100, 0, 100).requests} == {0.0}
    assert ArrivalProcess().offline


@pytest.mark.parametrize("rate", [0.5, 4.0, 100.0])
def test_poisson_mean_gap(rate):
    times = arrival_times(N, rate, 1.0, seed=1)
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    g = gaps(times)
    # 9,999 exponential gaps: standard error of the mean 1%; tolerance 4%.
    assert g.mean() == pytest.approx(1 / rate, rel=0.04)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 8.0])
def test_gamma_burstiness_cv(burstiness):
    rate = 10.0
    g = gaps(arrival_times(N, rate, burstiness, seed=2))
    # mean gap stays 1/R (tolerance 5%); CV of the gaps is 1/sqrt(B) (tolerance 8% relative).
    assert g.mean() == pytest.approx(1 / rate, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


def test_gamma_matches_vllm_definition():
    # vLLM benchmark_serving: theta = 1 / (request_rate * burstiness);
    # interval = np.random.gamma(shape=burstiness, scale=theta), first request at t=0.
    from kvbench.workloads.sampling import rng_for

    rate, b = 3.0, 0.7
    expected = rng_for(9, "arrivals").gamma(shape=b, scale=1 / (rate * b), size=99)
    times = arrival_times(100, rate, b, seed=9)
    np.testing.assert_allclose(times, np.concatenate(([0.0], np.cumsum(expected))))


def test_burstiness_one_is_poisson_and_ignored_offline():
    assert not arrival_times(50, math.inf, 0.3).any()


def test_single_requests_each_get_a_process_draw():
    requests = load_workload("uniform", 1000, 4, 100, request_rate=50.0).requests
    times = np.array([r.arrival_s for r in requests])
    assert times[0] == 0.0 and len(set(times.tolist())) == 1000
    assert np.diff(times).mean() == pytest.approx(1 / 50.0, rel=0.1)


def test_max_concurrency_is_exposed_not_applied():
    result = load_workload("uniform", 10, 0, 100, max_concurrency=3)
    assert result.max_concurrency == 3 and result.arrivals.max_concurrency == 3
    assert {r.arrival_s for r in result.requests} == {0.0}
    assert load_workload("uniform", 10, 0, 100).max_concurrency is None


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1.0, None), "request-rate"),
        ((math.nan, 1.0, None), "request-rate"),
        ((1.0, -1.0, None), "burstiness"),
        ((1.0, 1.0, 0), "max-concurrency"),
        ((1.0, 1.0, 2.5), "max-concurrency"),
    ],
)
def test_bad_process(args, match):
    with pytest.raises(KvbenchInputError, match=match):
        ArrivalProcess(*args)


@settings(max_examples=30, deadline=None)
@given(
    num=st.integers(0, 200),
    rate=st.floats(0.01, 1e4),
    burstiness=st.floats(0.05, 20),
    seed=st.integers(0, 2**40),
)
def test_arrival_times_are_seeded_and_monotone(num, rate, burstiness, seed):
    times = arrival_times(num, rate, burstiness, seed)
    assert len(times) == num
    assert np.all(np.diff(times) >= 0) and (num == 0 or times[0] == 0.0)
    np.testing.assert_array_equal(times, arrival_times(num, rate, burstiness, seed))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.floats(0.1, 50), st.floats(0.2, 4), st.integers(0, 99),
       st.lists(st.floats(0, 30), min_size=60, max_size=60))
def test_requests_of_their_own_are_timed_as_conversations_of_one(num, rate, burstiness, seed,
                                                                 given_s):
    """Requests without a conversation (the common case: no pass over groups) get the
    arrivals the general path gives each as a conversation of one."""
    requests = [Request(i, given_s[i], (1, 2, 3), 4) for i in range(num)]
    own = apply_arrivals(requests, rate, burstiness, seed)
    as_groups = apply_arrivals([replace(r, conversation_id=1000 + r.request_id)
                                for r in requests], rate, burstiness, seed)
    assert [(r.request_id, r.arrival_s) for r in own] == \
        [(r.request_id, r.arrival_s) for r in as_groups]
    assert all(r.conversation_id is None for r in own)
