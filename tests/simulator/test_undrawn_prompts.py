"""`kvbench simulate` under a strategy that reads no token ids draws no prompt ids: the
workload's prompts are `PromptTokens` that know their length, and its sequences count their
tokens (`TokenCount`). A strategy that hashes blocks of ids (prefix) still gets the ids, the
same ones an eager draw gives."""

from __future__ import annotations

import pytest

from kvbench.core.sequence import TokenCount
from kvbench.session.run_options import RunOptions
from kvbench.session.runner import prepare, run_one
from kvbench.session.session import expand_runs
from kvbench.workloads.entry import WORKLOADS
from kvbench.workloads.prompt_tokens import PromptTokens
from kvbench.workloads.sampling import TokenSampler, rng_for

VOCAB = 32_000
VALUES = dict(model="tiny", gpu="a100-40gb", workload="sharegpt", num_requests=20,
              request_rate="inf", max_model_len=256, kv_memory=str(4 * 1024 * 1024),
              warmup=0)


def _simulate(tmp_path, strategy):
    (run,) = expand_runs(RunOptions.for_kind("simulate", strategy=strategy, **VALUES))
    prepared = prepare(run)
    run_one(run, tmp_path / "out", show_progress=False, prepared=prepared)
    built, workload = prepared
    return built, workload.requests, run.engine.seed


@pytest.mark.parametrize("strategy", ["paged", "contiguous", "fp8", "hybrid"])
def test_a_replay_that_reads_no_ids_draws_none(tmp_path, strategy):
    built, requests, _ = _simulate(tmp_path, strategy)
    engine = built.engine
    assert not engine.holds_token_ids
    assert all(isinstance(r.prompt_token_ids, PromptTokens) for r in requests)
    assert not any(r.prompt_token_ids.is_drawn for r in requests)
    sequences = [seq for group in engine.sequences.values() for seq in group]
    assert len(sequences) == 20
    for seq in sequences:
        assert isinstance(seq.token_ids, TokenCount)
        assert len(seq.token_ids) == seq.end_len and seq.num_generated == seq.request.output_len


def test_prefix_caching_reads_the_ids_an_eager_draw_gives(tmp_path):
    built, requests, seed = _simulate(tmp_path, "prefix")
    assert built.engine.holds_token_ids
    assert all(r.prompt_token_ids.is_drawn for r in requests)
    vocab_size = built.model_config.vocab_size
    entry = WORKLOADS.get("sharegpt")
    generated = entry.generator(20, seed, vocab_size, **entry.params)  # unclipped, in order
    eager = TokenSampler(rng_for(seed, "sharegpt.tokens"), vocab_size).rows(
        [r.prompt_len for r in generated])
    assert [r.prompt_token_ids for r in requests] == [
        row[: r.prompt_len] for row, r in zip(eager, requests, strict=True)]


def test_undrawn_prompts_are_the_ids_of_an_eager_draw_whatever_is_read_first():
    lengths = [5, 1, 7, 3]
    eager = TokenSampler(rng_for(3, "t"), VOCAB).rows(lengths)
    lazy = TokenSampler(rng_for(3, "t"), VOCAB).lazy_rows(lengths)
    assert [len(p) for p in lazy] == lengths and not any(p.is_drawn for p in lazy)
    head = lazy[2][:4]  # clipping keeps the head: still undrawn
    assert isinstance(head, PromptTokens) and len(head) == 4 and not head.is_drawn
    assert lazy[3][1] == eager[3][1]  # the last prompt read first draws them all
    assert all(p.is_drawn for p in lazy)
    assert lazy == eager and head == eager[2][:4] and list(head) == list(eager[2][:4])
    assert hash(lazy[0]) == hash(eager[0]) and sorted(lazy) == sorted(eager)
    assert lazy[0] + (1, 2) == eager[0] + (1, 2)
