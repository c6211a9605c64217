"""A Mistral whose 32-token window is shorter than the context: the engine-parity scenarios
at contexts of 4+ windows, against transformers' MistralForCausalLM."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_preemption,
    check_prefill_and_decode,
    check_prefix_hit,
)
from tests.models.test_gemma import reference_prefill_logits

transformers = pytest.importorskip("transformers")

WINDOW = 32
TINY_MISTRAL = dict(
    vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    sliding_window=WINDOW,
)


@pytest.fixture(scope="module")
def mistral_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mistral-window")
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(transformers.MistralConfig(**TINY_MISTRAL)).eval()
    model.save_pretrained(folder)
    return folder, model


def test_prefill_logits_match_transformers(mistral_checkpoint):
    """300 tokens (9+ windows): logits within 1e-4 of transformers'."""
    folder, hf_model = mistral_checkpoint
    prompt = random_prompts(1, 512, seed=3, min_len=300, max_len=300)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(reference_prefill_logits(folder, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_prefill_and_decode_match_transformers(mistral_checkpoint):
    check_prefill_and_decode(*mistral_checkpoint, min_len=4 * WINDOW, max_len=200)


def test_chunked_prefill_matches_transformers(mistral_checkpoint):
    """64-token chunks over a 32-token window: the window spans chunk boundaries."""
    check_chunked_prefill(*mistral_checkpoint, min_len=150, max_len=220)


def test_preemption_matches_transformers(mistral_checkpoint):
    """Two layers of 2 KV heads of 16, float32: 512 B a token, 420 tokens in 210 KiB."""
    check_preemption(*mistral_checkpoint, kv_memory="210KiB")


def test_prefix_hit_matches_transformers(mistral_checkpoint):
    check_prefix_hit(*mistral_checkpoint)


@pytest.mark.parametrize(("strategy", "block_size", "refused"), [
    ("paged", 64, True), ("prefix", 64, True), ("paged", 32, False), ("contiguous", 64, False),
])
def test_block_larger_than_the_window_is_refused(strategy, block_size, refused, tmp_path,
                                                 capsys):
    """A block of more tokens than the window holds tokens its layers no longer attend to;
    contiguous has no blocks."""
    import json

    from kvbench.cli import main

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_MISTRAL, "model_type": "mistral"}))
    out = tmp_path / "out"
    code = main(["simulate", "--model", str(folder), "--strategy", strategy, "--block-size",
                 str(block_size), "--num-requests", "4", "--warmup", "0", "--out", str(out),
                 "--quiet"])
    err = capsys.readouterr().err
    if refused:
        assert code == 2 and not out.exists()
        assert err.strip().splitlines()[-1].endswith(
            f"--block-size {block_size} is larger than {folder}'s 32-token sliding window (its "
            "blocks would hold tokens the window layers no longer attend to): give --block-size "
            "32 or less")
        assert "Traceback" not in err
    else:
        assert code == 0, err
