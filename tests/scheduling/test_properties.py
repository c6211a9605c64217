"""Property-based tests (hypothesis): random workloads, budgets, block sizes and policies.

For every drawn scenario the engine is stepped by hand and, after every step, the cache's
ownership invariants are checked (`helpers.check_invariants`: no block owned by two live
sequences unless shared by design, reference counts match the tables and never go negative,
contiguous ranges and holes tile the arena). At the end: every request finished with exactly
its requested output length, its tokens equal those of an unbatched fp32 greedy run of the
same prompt, preempted requests completed, the per-step and per-request preemption counts
agree, and the pool is whole.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvbench.core.sequence import SequenceStatus
from kvbench.scheduling import POLICIES, QUEUE_ORDERS
from kvbench.strategies import STRATEGIES
from tests.scheduling.helpers import (
    TINY_BYTES_PER_SLOT,
    PreemptionOrder,
    drive,
    generated,
    make_engine,
    request,
    shared_reference,
)

MAX_MODEL_LEN = 64
# A longer random search: KVBENCH_PROPERTY_EXAMPLES=500 pytest tests/scheduling/test_properties.py
EXAMPLES = int(os.environ.get("KVBENCH_PROPERTY_EXAMPLES", "0"))
SETTINGS = settings(
    max_examples=EXAMPLES or 30, deadline=None, derandomize=not EXAMPLES, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _required_slots(strategy: str, reserve: str, block_size: int, final_kv_len: int) -> int:
    if strategy == "contiguous":
        if reserve == "max":
            return MAX_MODEL_LEN
        if reserve == "pow2":
            return max(min(1 << (final_kv_len - 1).bit_length(), MAX_MODEL_LEN), final_kv_len)
        return final_kv_len
    return -(-final_kv_len // block_size) * block_size


# Every registered strategy, policy and queue order is drawn. A variant (fp8: paged with an fp8
# cache) keeps its base's books, already drawn, and its tokens are not the fp32 reference's.
STRATEGY_NAMES = tuple(entry.name for entry in STRATEGIES if entry.base is None)
POLICY_NAMES = tuple(POLICIES.names())
QUEUE_ORDER_NAMES = tuple(QUEUE_ORDERS.names())
# Strategies whose reservation `_required_slots` knows; any other gets a roomy budget.
KNOWN_RESERVATIONS = ("contiguous", "paged", "prefix")


@st.composite
def scenarios(draw, strategies=STRATEGY_NAMES, policies=POLICY_NAMES,
              queue_orders=QUEUE_ORDER_NAMES, tight=False):
    strategy = draw(st.sampled_from(strategies))
    reserve = draw(st.sampled_from(["max", "pow2", "exact"])) if strategy == "contiguous" \
        else "max"
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    batching = draw(st.sampled_from(policies))
    queue_order = draw(st.sampled_from(queue_orders))
    chunked = draw(st.booleans())
    requests = []
    for i in range(draw(st.integers(1, 8))):
        prompt = draw(st.lists(st.integers(0, 2047), min_size=1, max_size=24))
        output_len = draw(st.integers(1, 16))
        n = draw(st.sampled_from([1, 1, 1, 1, 2]))
        arrival_step = draw(st.integers(0, 12))
        requests.append((arrival_step, request(i, prompt, output_len, n=n)))
    need = max(
        _required_slots(strategy, reserve, block_size, r.prompt_len + r.output_len - 1)
        if strategy in KNOWN_RESERVATIONS else MAX_MODEL_LEN * 2
        for _, r in requests
    )
    # from "one request at a time" to comfortably more than everything at once
    slots = draw(st.integers(need, need + 16 if tight else 3 * need + 32))
    options = dict(
        strategy=strategy, reserve=reserve, block_size=block_size, batching=batching,
        queue_order=queue_order,
        chunked_prefill=chunked, max_model_len=MAX_MODEL_LEN,
        kv_memory=slots * TINY_BYTES_PER_SLOT,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(
            st.sampled_from([3, 8, 16, 64]) if chunked else st.sampled_from([64, 100])
        ),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.2])),
    )
    return options, requests


def _run_and_check(options, requests) -> None:
    engine = make_engine(**options)
    drive(engine, requests, check=PreemptionOrder())
    limits = engine.policy.limits
    for record in engine.steps:
        assert record.num_batched_tokens <= limits.max_num_batched_tokens
        # forked samples count toward max_num_seqs (capped: n > max_num_seqs still runs)
        assert record.num_running <= max(limits.max_num_seqs, max(r.n for _, r in requests))
    preempted = 0
    for _, req in requests:
        samples = engine.sequences[req.request_id]
        assert len(samples) == req.n
        reference = shared_reference(MAX_MODEL_LEN)
        expected = reference.tokens(req.prompt_token_ids, req.output_len)
        for seq, tokens in zip(samples, generated(engine, req.request_id), strict=True):
            assert seq.status is SequenceStatus.FINISHED and seq.finish_s is not None
            assert len(tokens) == req.output_len
            assert tokens == expected, f"request {req.request_id} sample {seq.sample_index}"
            assert len(seq.token_times_s) == req.output_len
            preempted += seq.preemptions
    assert sum(r.preemptions for r in engine.steps) == preempted
    if options["strategy"] == "contiguous":
        assert preempted == 0, "contiguous never preempts"
    event("preempted" if preempted else "no preemption")
    event(f"{options['batching']}+{options['queue_order']}"
          f"{'+chunked' if options['chunked_prefill'] else ''}")


@SETTINGS
@given(scenarios())
def test_random_workloads_finish_exactly_with_unbatched_tokens(scenario):
    _run_and_check(*scenario)


@settings(SETTINGS, max_examples=EXAMPLES or 15)
@given(scenarios(queue_orders=("sjf",)))
def test_shortest_job_first_stays_in_limits_and_finishes_everything(scenario):
    """sjf reorders the queue only, under every policy: limits, cache invariants and tokens
    hold as for FCFS."""
    _run_and_check(*scenario)


@settings(SETTINGS, max_examples=EXAMPLES or 20)
@given(scenarios(strategies=tuple(s for s in STRATEGY_NAMES if s != "contiguous"), tight=True))
def test_tight_paged_budgets_preempt_and_still_match(scenario):
    """Growing strategies with room for little more than one request: preemption is common."""
    _run_and_check(*scenario)
