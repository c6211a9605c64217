"""`static` batching: a batch runs until every member is done; arrivals wait; memory held."""

from __future__ import annotations

import pytest

from tests.scheduling.helpers import (
    TINY_BYTES_PER_SLOT,
    generated,
    make_engine,
    prompt_of,
    request,
    run_recorded,
    shared_reference,
)


def test_batch_runs_until_every_member_finishes_and_arrivals_wait():
    engine = make_engine(batching="static", max_num_seqs=3, max_model_len=64, kv_memory="1MiB")
    outputs = {0: 2, 1: 6, 2: 4, 3: 3, 4: 1}
    arrivals = [(0 if i < 3 else 1, request(i, prompt_of(i, 5 + i), n))
                for i, n in outputs.items()]
    snaps = run_recorded(engine, arrivals)
    # step 0 prefills the first batch; steps 1-5 decode it (the longest member needs 6 tokens)
    assert snaps[0].record.num_prefill_seqs == 3 and snaps[0].record.num_decode_seqs == 0
    for i in range(1, 6):
        assert snaps[i].record.num_prefill_seqs == 0
        assert set(snaps[i].waiting) == {3, 4}, "requests that arrived meanwhile must wait"
        unfinished = [r for r, n in outputs.items() if r < 3 and n > i]
        assert snaps[i].record.num_decode_seqs == len(unfinished)
    # the second batch starts only once every member of the first has finished
    assert snaps[6].record.num_prefill_seqs == 2 and snaps[6].waiting == []
    first_batch_done = max(engine.sequences[r][0].finish_s for r in range(3))
    assert all(engine.sequences[r][0].admitted_s >= first_batch_done for r in (3, 4))
    for r, n in outputs.items():
        (tokens,) = generated(engine, r)
        prompt = engine.sequences[r][0].request.prompt_token_ids
        assert tokens == shared_reference().tokens(prompt, n)


@pytest.mark.parametrize(("strategy", "reserve"), [("paged", "max"), ("contiguous", "exact")])
def test_finished_members_keep_their_memory_until_the_batch_ends(strategy, reserve):
    engine = make_engine(batching="static", strategy=strategy, reserve=reserve, max_num_seqs=2,
                         max_model_len=64, kv_memory="1MiB")
    arrivals = [(0, request(0, prompt_of(0, 6), 2)), (0, request(1, prompt_of(1, 6), 5)),
                (0, request(2, prompt_of(2, 6), 2))]
    snaps = run_recorded(engine, arrivals)
    # request 0 finishes at step 1, request 1 at step 4: 0 keeps its memory through step 4
    assert snaps[1].finished_members == [0]
    for i in range(1, 5):
        assert 0 in snaps[i].holding and 0 not in snaps[i].running
    held = [s.record.kv_token_bytes + s.record.kv_reserved_bytes + s.record.kv_internal_bytes
            for s in snaps[:5]]
    assert held == sorted(held), "a static batch gives nothing back before it ends"
    # the next batch (request 2) starts after both are released
    assert snaps[5].running == [2] and snaps[5].holding == {2}


def test_batch_size_is_what_the_cache_admits():
    """contiguous --reserve max: a batch holds as many max-length reservations as fit."""
    engine = make_engine(batching="static", strategy="contiguous", reserve="max",
                         max_model_len=64, max_num_seqs=8, kv_memory=150 * TINY_BYTES_PER_SLOT)
    arrivals = [(0, request(i, prompt_of(i, 4), 3)) for i in range(5)]
    snaps = run_recorded(engine, arrivals)
    prefill_batches = [s.record.num_prefill_seqs for s in snaps if s.record.num_prefill_seqs]
    assert prefill_batches == [2, 2, 1]
    assert engine.steps[0].kv_external_bytes == 22 * TINY_BYTES_PER_SLOT  # hole < 64 slots


def test_prompts_are_packed_into_the_token_budget_then_decode_together():
    engine = make_engine(batching="static", max_model_len=64, max_num_batched_tokens=64,
                         max_num_seqs=4, kv_memory="1MiB")
    arrivals = [(0, request(i, prompt_of(i, 30), 3)) for i in range(4)]
    snaps = run_recorded(engine, arrivals)
    records = [s.record for s in snaps]
    assert [(r.num_prefill_seqs, r.num_decode_seqs, r.num_batched_tokens) for r in records] == [
        (2, 0, 60), (2, 0, 60), (0, 4, 4), (0, 4, 4)
    ]
    assert len(snaps[0].running) == 4  # all four admitted at once


def test_chunked_prefill_cuts_static_prompts_to_the_budget():
    engine = make_engine(batching="static", chunked_prefill=True, max_model_len=64,
                         max_num_batched_tokens=16, max_num_seqs=2, kv_memory="1MiB")
    arrivals = [(0, request(0, prompt_of(0, 20), 2)), (0, request(1, prompt_of(1, 10), 2))]
    snaps = run_recorded(engine, arrivals)
    tokens = [(r.num_prefill_tokens, r.num_decode_seqs) for r in (s.record for s in snaps)]
    assert tokens == [(16, 0), (14, 0), (0, 2)]
    for r in (0, 1):
        req = engine.sequences[r][0].request
        assert generated(engine, r) == [shared_reference().tokens(req.prompt_token_ids, 2)]


def test_member_preempted_by_a_paged_batch_finishes_in_a_later_batch():
    """Pool of 6 blocks of 4: two members of 4 + 11 tokens each outgrow it at position 12;
    the younger one is preempted (recompute) and runs again once the batch ends."""
    engine = make_engine(batching="static", block_size=4, watermark=0.0, max_model_len=64,
                         kv_memory=24 * TINY_BYTES_PER_SLOT)
    arrivals = [(0, request(i, prompt_of(i, 4), 12)) for i in range(2)]
    snaps = run_recorded(engine, arrivals)
    a, b = engine.sequences[0][0], engine.sequences[1][0]
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert sum(s.record.preemptions for s in snaps) == 1
    victim_step = next(i for i, s in enumerate(snaps) if s.record.preemptions)
    assert snaps[victim_step].waiting == [1] and snaps[victim_step].running == [0]
    # B re-enters only in the next batch, after A finished, recomputing prompt + generated
    readmit = next(i for i in range(victim_step, len(snaps)) if 1 in snaps[i].running)
    assert 0 not in snaps[readmit].running
    # preempted when A needed position 12: B had sampled 9 tokens (steps 0-8)
    assert victim_step == 9
    assert snaps[readmit].record.num_prefill_tokens == 4 + 9
    for r in (0, 1):
        assert generated(engine, r) == [shared_reference().tokens(prompt_of(r, 4), 12)]
