"""`continuous` batching: iteration-level admission, limits, chunked prefill, watermark and
preemption (vLLM's recompute), and the preemption counts in the results files."""

from __future__ import annotations

import json

import pandas as pd

from kvbench.cli import main
from tests.scheduling.helpers import (
    TINY_BYTES_PER_SLOT,
    PreemptionOrder,
    drive,
    generated,
    make_engine,
    prompt_of,
    request,
    run_recorded,
    shared_reference,
)


def expected(engine, request_id: int) -> list[int]:
    req = engine.sequences[request_id][0].request
    return shared_reference().tokens(req.prompt_token_ids, req.output_len)


def test_sequences_join_and_leave_at_every_step():
    engine = make_engine(max_num_seqs=4, max_model_len=64, kv_memory="1MiB")
    arrivals = [(0, request(0, prompt_of(0, 6), 5)), (0, request(1, prompt_of(1, 6), 2)),
                (2, request(2, prompt_of(2, 6), 3))]
    snaps = run_recorded(engine, arrivals)
    shape = [(s.record.num_prefill_seqs, s.record.num_decode_seqs) for s in snaps]
    # prefill-first: the step that admits request 2 runs only its prompt
    assert shape[:5] == [(2, 0), (0, 2), (1, 0), (0, 2), (0, 2)]
    assert 1 not in snaps[1].holding, "a finished sequence gives its memory back at once"
    assert snaps[2].running == [0, 2], "an arrival joins while the batch is running"
    for r in range(3):
        assert generated(engine, r) == [expected(engine, r)]


def test_max_num_seqs_caps_the_running_set_and_frees_seats_early():
    engine = make_engine(max_num_seqs=2, max_model_len=64, kv_memory="1MiB")
    outputs = [2, 6, 3, 2]
    arrivals = [(0, request(i, prompt_of(i, 5), n)) for i, n in enumerate(outputs)]
    snaps = run_recorded(engine, arrivals)
    assert max(len(s.running) for s in snaps) == 2
    assert all(s.record.num_running <= 2 for s in snaps)
    # request 2 takes request 0's seat as soon as 0 finishes (step 1), not when 1 does
    assert snaps[2].record.num_prefill_seqs == 1 and snaps[2].running == [1, 2]


def test_token_budget_bounds_each_step():
    engine = make_engine(max_model_len=64, max_num_batched_tokens=64, kv_memory="1MiB")
    arrivals = [(0, request(i, prompt_of(i, 30), 3)) for i in range(3)]
    snaps = run_recorded(engine, arrivals)
    records = [s.record for s in snaps]
    assert [r.num_batched_tokens for r in records[:3]] == [60, 30, 3]
    assert all(r.num_batched_tokens <= 64 for r in records)


def test_decodes_share_a_small_token_budget_and_all_finish():
    engine = make_engine(max_model_len=64, max_num_batched_tokens=4, chunked_prefill=True,
                         max_num_seqs=8, kv_memory="1MiB")
    arrivals = [(0, request(i, prompt_of(i, 2), 3)) for i in range(6)]
    snaps = run_recorded(engine, arrivals)
    assert all(s.record.num_batched_tokens <= 4 for s in snaps)
    for r in range(6):
        assert generated(engine, r) == [expected(engine, r)]


def test_chunked_prefill_mixes_prompt_chunks_with_decodes():
    """A 50-token prompt arrives while two sequences decode: with chunked prefill it is
    cut into chunks of what the budget (16) leaves after the decodes, and the decodes get a
    token at every step; without, the prompt's step stalls them."""
    def run(chunked: bool):
        engine = make_engine(max_model_len=64, max_num_batched_tokens=64 if not chunked else 16,
                             chunked_prefill=chunked, kv_memory="1MiB")
        arrivals = [(0, request(0, prompt_of(0, 4), 30)), (0, request(1, prompt_of(1, 4), 30)),
                    (2, request(2, prompt_of(2, 50), 3))]
        return engine, run_recorded(engine, arrivals)

    engine, snaps = run(chunked=True)
    records = [s.record for s in snaps]
    assert [(r.num_decode_seqs, r.num_prefill_tokens) for r in records[2:7]] == [
        (2, 14), (2, 14), (2, 14), (2, 8), (3, 0)
    ]
    assert all(r.num_batched_tokens <= 16 for r in records)
    first = engine.sequences[0][0]
    assert len(first.token_times_s) == 30 and len(engine.steps) >= 30
    assert engine.sequences[2][0].first_token_s == engine.sequences[0][0].token_times_s[5]
    for r in range(3):
        assert generated(engine, r) == [expected(engine, r)]

    _, stalled = run(chunked=False)
    assert (stalled[2].record.num_prefill_seqs, stalled[2].record.num_decode_seqs) == (1, 0)


def test_watermark_keeps_free_blocks_for_running_sequences():
    """20 blocks of 4, watermark 20% = 4 blocks. B (60-token prompt, 15 blocks) would fit
    next to A (3 blocks) but would leave only 2 free: it waits until A is done."""

    def admitted_step(watermark: float) -> int:
        engine = make_engine(block_size=4, watermark=watermark, max_model_len=64,
                             kv_memory=80 * TINY_BYTES_PER_SLOT)
        arrivals = [(0, request(0, prompt_of(0, 8), 12)), (1, request(1, prompt_of(1, 60), 2))]
        snaps = run_recorded(engine, arrivals)
        return next(i for i, s in enumerate(snaps) if 1 in s.running), snaps

    step, snaps = admitted_step(0.2)
    assert step == 12  # A's 12th and last token is sampled at step 11
    assert all(s.waiting == [1] and s.running == [0] for s in snaps[1:11])
    step, _ = admitted_step(0.0)
    assert step == 1


def test_preemption_takes_the_most_recently_admitted_and_requeues_it_first():
    """8 blocks of 4. A, B (4-token prompts) and C (6 tokens) fill 7 blocks by step 3; at
    step 5 A and B both need a block: A takes the last one, and B's need preempts C (the
    most recently admitted), which goes back to the queue ahead of D (waiting since step 1
    for 7 free blocks)."""
    engine = make_engine(block_size=4, watermark=0.0, max_model_len=64,
                         kv_memory=32 * TINY_BYTES_PER_SLOT)
    arrivals = [(0, request(0, prompt_of(0, 4), 12)), (0, request(1, prompt_of(1, 4), 12)),
                (0, request(2, prompt_of(2, 6), 12)), (1, request(3, prompt_of(3, 28), 2))]
    order = PreemptionOrder()
    snaps: list[list[int]] = []

    def check(e) -> None:
        order(e)
        snaps.append([s.request.request_id for s in e.waiting])

    drive(engine, arrivals, check=check)
    victims = [(i, [s.request.request_id for s in v]) for i, v in enumerate(order.victims) if v]
    assert victims[0] == (5, [2])
    assert snaps[5] == [2, 3], "the preempted sequence goes back to the front of the queue"
    c = engine.sequences[2][0]
    assert c.preemptions >= 1 and engine.sequences[0][0].preemptions == 0
    assert sum(r.preemptions for r in engine.steps) == sum(
        s.preemptions for g in engine.sequences.values() for s in g)
    for r in range(4):
        assert generated(engine, r) == [expected(engine, r)]


def test_forced_preemptions_complete_with_the_unpreempted_tokens():
    """Eight long generations in a pool that holds about two: many preemptions (recompute of
    prompt + generated tokens), same tokens as a run with room for all, and as each alone."""
    prompts = [prompt_of(i, 10 + i) for i in range(8)]
    arrivals = [(0, request(i, p, 40)) for i, p in enumerate(prompts)]

    def tokens(**options):
        engine = make_engine(max_model_len=64, **options)
        drive(engine, arrivals, check=PreemptionOrder())
        return engine, [generated(engine, i)[0] for i in range(8)]

    tight, got = tokens(block_size=16, kv_memory=128 * TINY_BYTES_PER_SLOT)
    roomy, want = tokens(block_size=16, kv_memory="2MiB")
    preemptions = sum(s.preemptions for g in tight.sequences.values() for s in g)
    assert preemptions > 0 and sum(r.preemptions for r in roomy.steps) == 0
    assert sum(r.preemptions for r in tight.steps) == preemptions
    assert got == want == [shared_reference().tokens(p, 40) for p in prompts]


def test_preemption_counts_in_steps_and_requests_csv(tmp_path):
    trace = tmp_path / "long.jsonl"
    trace.write_text("".join(
        json.dumps({"prompt_len": 8 + i, "output_len": 100}) + "\n" for i in range(8)
    ))
    out = tmp_path / "out"
    assert main(["run", "--workload", str(trace), "--strategy", "paged", "--batching",
                 "continuous,static", "--kv-memory", "512KiB", "--max-model-len", "128",
                 "--warmup", "0", "--out", str(out), "--quiet"]) == 0
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    for folder in ("paged", "paged-static"):
        summary = json.loads((root / folder / "kvbench_summary.json").read_text())
        steps = pd.read_csv(root / folder / "steps.csv")
        requests = pd.read_csv(root / folder / "requests.csv")
        assert summary["completed"] == 8
        assert (requests["output_tokens"] == 100).all()
        total = summary["scheduler"]["preemptions"]
        assert total > 0, folder
        assert steps["preemptions"].sum() == requests["preemptions"].sum() == total
