"""`contiguous` computes `paged`'s tokens exactly on windowed models (a Gemma-3-like 5:1
sliding:full pattern, and a Mistral whose every layer is windowed) while each window group
holds only a ring of its sequence's reservation, at contexts of 4+ windows: with the prompt
written whole and with chunked prefill (rings then wrap inside a prompt). The accounting check
is on, so every group's books are recomputed from scratch at every step."""

from __future__ import annotations

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.strategies.base import CHECK_ACCOUNTING_ENV
from tests.conftest import random_prompts
from tests.engine.windowed_checkpoints import WINDOW, write_five_to_one_checkpoint

transformers = pytest.importorskip("transformers")



@pytest.fixture(scope="module")
def gemma_like_checkpoint(tmp_path_factory):
    return write_five_to_one_checkpoint(tmp_path_factory.mktemp("qwen2-5to1-contiguous"))


@pytest.fixture(scope="module")
def mistral_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mistral-window-contiguous")
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        sliding_window=WINDOW)
    transformers.MistralForCausalLM(config).eval().save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def check_accounting(monkeypatch):
    monkeypatch.setenv(CHECK_ACCOUNTING_ENV, "1")


def run(folder, prompts, new_tokens, **options):
    """Greedy tokens of every prompt (all submitted at once) and the engine."""
    engine = build_engine(EngineConfig(model=str(folder), device="cpu", kv_memory="4MiB",
                                       **options)).engine
    for i, prompt in enumerate(prompts):
        engine.add_request(Request(i, 0.0, tuple(prompt), new_tokens))
    engine.run_to_completion()
    seqs = [engine.sequences[i][0] for i in range(len(prompts))]
    return [s.token_ids[len(p):] for s, p in zip(seqs, prompts, strict=True)], engine, seqs


def check_same_tokens_with_rings(folder, prompts, new_tokens, **options):
    paged, _, _ = run(folder, prompts, new_tokens, strategy="paged", **options)
    contiguous, engine, seqs = run(folder, prompts, new_tokens, strategy="contiguous",
                                   max_model_len=256, **options)
    assert contiguous == paged
    strategy = engine.strategy
    assert strategy.is_whole()
    for seq in seqs:  # every window group held a ring the sequence wrapped around
        lengths = strategy.group_lengths(seq)
        for window, length in zip(strategy.windows, lengths, strict=True):
            if window is None:
                assert length == strategy.reservation(seq)
            else:
                assert length < seq.final_kv_len <= strategy.reservation(seq)


def test_prompts_written_whole(gemma_like_checkpoint):
    prompts = random_prompts(4, 512, seed=1, min_len=4 * WINDOW, max_len=100)
    check_same_tokens_with_rings(gemma_like_checkpoint, prompts, 40)


def test_chunked_prefill_wraps_inside_the_prompt(gemma_like_checkpoint):
    prompts = random_prompts(3, 512, seed=5, min_len=4 * WINDOW, max_len=120)
    check_same_tokens_with_rings(gemma_like_checkpoint, prompts, 24, chunked_prefill=True,
                                 max_num_batched_tokens=24, reserve="exact")


@pytest.mark.parametrize("chunked", [False, True])
def test_every_layer_windowed(mistral_checkpoint, chunked):
    prompts = random_prompts(3, 512, seed=2, min_len=4 * WINDOW, max_len=90)
    options = dict(chunked_prefill=True, max_num_batched_tokens=32) if chunked else {}
    check_same_tokens_with_rings(mistral_checkpoint, prompts, 32, **options)


def test_parallel_samples_fork_the_rings(gemma_like_checkpoint):
    """Parallel sampling forks each prompt's ranges after its prefill (a ring copies its last
    tokens): every sample's tokens are paged's, sampled with a temperature."""
    prompts = random_prompts(2, 512, seed=9, min_len=4 * WINDOW, max_len=90)

    def samples(strategy: str, **options):
        engine = build_engine(EngineConfig(model=str(gemma_like_checkpoint), device="cpu",
                                           kv_memory="4MiB", strategy=strategy,
                                           temperature=0.8, seed=3, **options)).engine
        for i, prompt in enumerate(prompts):
            engine.add_request(Request(i, 0.0, tuple(prompt), 30, n=3))
        engine.run_to_completion()
        return [[s.token_ids for s in engine.sequences[i]] for i in range(len(prompts))]

    paged = samples("paged")
    assert samples("contiguous", max_model_len=256) == paged
    assert any(len({tuple(t) for t in group}) > 1 for group in paged)  # samples differ
