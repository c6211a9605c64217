"""`hybrid` computes `paged`'s tokens exactly on a windowed model (a Gemma-3-like 5:1
sliding:full layer pattern), at contexts several times the window, while its window groups
give back the blocks behind the window: through prefill and decode, chunked prefill and
preemption. Both run with the accounting check on, so every group's books are recomputed
from scratch at every step."""

from __future__ import annotations

import pytest

from kvbench.strategies.base import CHECK_ACCOUNTING_ENV
from tests.conftest import random_prompts
from tests.engine.windowed_checkpoints import write_five_to_one_checkpoint
from tests.models.engine_parity import engine_tokens

pytest.importorskip("transformers")

# One layer's K and V of one token in float32: 2 KV heads x 16 head dim (the checkpoint's).
LAYER_TOKEN_BYTES = 2 * 2 * 16 * 4


@pytest.fixture(scope="module")
def windowed_checkpoint(tmp_path_factory):
    return write_five_to_one_checkpoint(tmp_path_factory.mktemp("qwen2-5to1"))


@pytest.fixture(autouse=True)
def check_accounting(monkeypatch):
    monkeypatch.setenv(CHECK_ACCOUNTING_ENV, "1")


def both(folder, prompts, new_tokens, **options):
    paged, paged_seqs = engine_tokens(folder, prompts, new_tokens, strategy="paged", **options)
    hybrid, hybrid_seqs = engine_tokens(folder, prompts, new_tokens, strategy="hybrid",
                                        **options)
    return paged, hybrid, paged_seqs, hybrid_seqs


def test_prefill_and_decode_past_the_window(windowed_checkpoint):
    prompts = random_prompts(4, 512, seed=1, min_len=64, max_len=100)  # >= 4 x the window
    paged, hybrid, _, _ = both(windowed_checkpoint, prompts, 40, kv_memory="4MiB",
                               block_size=4)
    assert hybrid == paged


def test_chunked_prefill_crossing_window_boundaries(windowed_checkpoint):
    prompts = random_prompts(3, 512, seed=5, min_len=70, max_len=110)
    paged, hybrid, _, _ = both(windowed_checkpoint, prompts, 24, kv_memory="4MiB",
                               block_size=4, chunked_prefill=True, max_num_batched_tokens=24)
    assert hybrid == paged


def test_preemption_at_an_equal_budget(windowed_checkpoint):
    """At one budget paged preempts and hybrid, holding ~half as much per sequence, does
    not."""
    prompts = random_prompts(3, 512, seed=2, min_len=90, max_len=100)
    budget = 360 * 6 * LAYER_TOKEN_BYTES  # 360 tokens of every layer: the three need ~420
    paged, hybrid, paged_seqs, hybrid_seqs = both(
        windowed_checkpoint, prompts, 40, kv_memory=str(budget), block_size=4,
        max_model_len=160)
    assert sum(s.preemptions for s in paged_seqs) > 0
    assert sum(s.preemptions for s in hybrid_seqs) == 0
    assert hybrid == paged


def test_hybrid_preempted_and_recomputed_keeps_the_tokens(windowed_checkpoint):
    """Six long generations outgrow 1800 pool slots (each ends holding ~270 full-attention
    slots and 5 x 20 window slots): hybrid preempts, recomputes, and its tokens are paged's."""
    prompts = random_prompts(6, 512, seed=7, min_len=64, max_len=70)
    paged, _ = engine_tokens(windowed_checkpoint, prompts, 200, strategy="paged",
                             kv_memory="4MiB", block_size=4, max_model_len=300)
    hybrid, seqs = engine_tokens(windowed_checkpoint, prompts, 200, strategy="hybrid",
                                 kv_memory=str(1800 * LAYER_TOKEN_BYTES), block_size=4,
                                 max_model_len=300)
    assert sum(s.preemptions for s in seqs) > 0
    assert hybrid == paged


def test_prefix_hits_past_the_window(windowed_checkpoint):
    """A 200-token shared prefix (12x the window): later requests reuse its cached blocks
    under `hybrid-prefix`, the window groups only the blocks of the window before the hit's
    end, and decode past it with paged's tokens."""
    shared = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    prompts = [shared + tail for tail in random_prompts(3, 512, seed=4, min_len=10, max_len=40)]
    paged, _ = engine_tokens(windowed_checkpoint, prompts, 24, strategy="paged",
                             kv_memory="4MiB", block_size=4)
    # one at a time: each hits the prefix as computed blocks
    hits, seqs = engine_tokens(windowed_checkpoint, prompts, 24, strategy="hybrid-prefix",
                               kv_memory="4MiB", block_size=4, max_num_seqs=1)
    assert [s.cached_prompt_tokens for s in seqs] == [0, 200, 200]
    assert hits == paged


def test_prefix_hits_in_the_step_that_computes_the_prefix(windowed_checkpoint):
    """Admitted in the step that computes the shared prefix, later requests hit its blocks
    (named when scheduled, as vLLM caches a scheduled chunk's blocks) and read them in that
    step, after the first request wrote them: paged's tokens."""
    shared = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    prompts = [shared + tail for tail in random_prompts(3, 512, seed=4, min_len=10, max_len=40)]
    paged, _ = engine_tokens(windowed_checkpoint, prompts, 24, strategy="paged",
                             kv_memory="4MiB", block_size=4)
    hits, seqs = engine_tokens(windowed_checkpoint, prompts, 24, strategy="hybrid-prefix",
                               kv_memory="4MiB", block_size=4)
    assert [s.cached_prompt_tokens for s in seqs] == [0, 200, 200]
    assert [s.admitted_s for s in seqs] == [seqs[0].admitted_s] * 3  # one step
    assert hits == paged
