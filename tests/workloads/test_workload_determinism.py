"""Every workload is a pure function of its seed; every request is well-formed."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.errors import KvbenchInputError
from kvbench.workloads import WORKLOADS, load_workload

NAMES = sorted(WORKLOADS.names())
seeds = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    seed=seeds,
    num=st.integers(1, 30),
    rate=st.sampled_from([math.inf, 0.5, 20.0]),
)
def test_same_seed_same_requests(name, seed, num, rate):
    first = load_workload(name, num, seed, 1000, request_rate=rate, burstiness=0.5).requests
    again = load_workload(name, num, seed, 1000, request_rate=rate, burstiness=0.5).requests
    assert first == again


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_differ(name):
    a = load_workload(name, 20, 1, 32_000).requests
    b = load_workload(name, 20, 2, 32_000).requests
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in b]


@pytest.mark.parametrize("name", NAMES)
def test_arrival_process_does_not_change_tokens(name):
    offline = load_workload(name, 40, 7, 32_000).requests
    poisson = load_workload(name, 40, 7, 32_000, request_rate=3.0).requests

    def key(r):
        return (r.prompt_token_ids, r.output_len, r.n)

    assert sorted(map(key, offline)) == sorted(map(key, poisson))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(NAMES), seed=seeds, num=st.integers(1, 40), vocab=st.integers(1, 50))
def test_requests_are_well_formed(name, seed, num, vocab):
    requests = load_workload(name, num, seed, vocab, request_rate=10.0).requests
    assert len(requests) == num
    assert [r.request_id for r in requests] == list(range(num))
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0
    for r in requests:
        assert r.prompt_len >= 1 and r.output_len >= 1 and r.n >= 1
        assert all(isinstance(t, int) and 0 <= t < vocab for t in r.prompt_token_ids)


@pytest.mark.parametrize("name", NAMES)
def test_offline_default_all_at_zero(name):
    # chat's default think time is 0, so offline means every request at t=0 for all built-ins.
    assert {r.arrival_s for r in load_workload(name, 50, 0, 100).requests} == {0.0}


@pytest.mark.parametrize("name", NAMES)
def test_ten_thousand_requests_in_under_five_seconds(name):
    start = time.perf_counter()
    requests = load_workload(name, 10_000, 3, 32_000).requests
    elapsed = time.perf_counter() - start
    assert len(requests) == 10_000
    assert elapsed < 5.0, f"{name}: {elapsed:.2f}s"


def test_positional_call_signature_still_works():
    requests = load_workload("chat", 8, 0, 2048).requests
    assert len(requests) == 8 and requests[0].prefix_id == "system-0"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_requests": 0}, "num-requests"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"request_rate": 0.0}, "request-rate"),
        ({"request_rate": -1.0}, "request-rate"),
        ({"burstiness": 0.0}, "burstiness"),
        ({"burstiness": math.inf}, "burstiness"),
        ({"max_concurrency": 0}, "max-concurrency"),
        ({"max_model_len": 1}, "max-model-len"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bad_arguments_are_input_errors(kwargs, match):
    args = {"num_requests": 4, "seed": 0, "vocab_size": 100, **kwargs}
    with pytest.raises(KvbenchInputError, match=match):
        load_workload("uniform", **args)
