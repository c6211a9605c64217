"""Shared fixtures: small Hugging Face checkpoints made on the fly (no hub access needed)."""

from __future__ import annotations

import os
import random

import pytest
import torch

# One thread: faster and steadier than two spinning OpenMP threads on a shared 2-core runner.
torch.set_num_threads(1)
# Without CUDA the Triton kernels run in Triton's CPU interpreter. TRITON_INTERPRET must be set
# before any test module (of any folder, collected in any order) first imports the kernels:
# they are decorated for the interpreter or for the compiler once, at that import.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

HF_SHAPES = {
    # GQA ratio 1, untied embeddings
    "mha-untied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False),
    # GQA ratio 4, tied embeddings
    "gqa4-tied": dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True),
}


def make_hf_checkpoint(folder, shape: str, seed: int = 0):
    """A random `LlamaForCausalLM` saved with `save_pretrained`; returns the HF model."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        # Wider than HF's default init so greedy choices are well separated (random-weight
        # logits are otherwise nearly flat and float rounding could flip near-ties).
        initializer_range=0.15,
        **HF_SHAPES[shape],
    )
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    return model


def random_prompts(count: int, vocab: int, seed: int, min_len: int = 1, max_len: int = 40):
    rng = random.Random(seed)
    return [
        [rng.randrange(vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(count)
    ]


@pytest.fixture(scope="session", params=list(HF_SHAPES))
def hf_checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"hf-{request.param}")
    model = make_hf_checkpoint(folder, request.param)
    return folder, model


def make_word_tokenizer(folder, text: str):
    """A word-level Hugging Face tokenizer over the words of `text`, saved in `folder` (no hub
    access needed); returns the folder."""
    import re

    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0}
    for word in re.findall(r"\w+|[^\w\s]", text):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder
