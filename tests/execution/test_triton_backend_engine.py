"""The engine on the Triton kernels (CPU interpreter) gives the torch backend's tokens."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import

pytest.importorskip("triton")

import kvbench  # noqa: E402
from tests.conftest import random_prompts  # noqa: E402


@pytest.mark.parametrize(
    ("strategy", "options"),
    [("paged", {"block_size": 8}), ("contiguous", {"reserve": "exact"})],
)
def test_triton_backend_tokens_equal_torch_backend(strategy, options):
    prompts = random_prompts(3, 2048, seed=11, min_len=3, max_len=21)
    common = dict(strategy=strategy, kv_memory="2MiB", max_model_len=64, **options)
    torch_tokens = kvbench.generate(prompts, 6, attention_backend="torch", **common)
    triton_tokens = kvbench.generate(prompts, 6, attention_backend="triton", **common)
    assert triton_tokens == torch_tokens


@pytest.mark.parametrize(
    ("strategy", "options"),
    [("paged", {"block_size": 4}), ("contiguous", {"reserve": "exact"})],
)
def test_windowed_model_on_triton_equals_torch_backend(strategy, options, tmp_path):
    """A Mistral whose 8-token window is far shorter than its prompts: the Triton window
    variants (prefill, chunked prefill and decode) give the torch backend's tokens."""
    from tests.models.test_config_fields import make_checkpoint

    make_checkpoint(tmp_path, "MistralConfig", sliding_window=8)
    prompts = random_prompts(2, 512, seed=5, min_len=20, max_len=30)
    common = dict(model=str(tmp_path), strategy=strategy, kv_memory="1MiB", max_model_len=48,
                  max_num_batched_tokens=16, chunked_prefill=True, **options)
    torch_tokens = kvbench.generate(prompts, 8, attention_backend="torch", **common)
    assert kvbench.generate(prompts, 8, attention_backend="triton", **common) == torch_tokens


def test_contiguous_rings_beside_a_full_layer_on_triton_equal_torch_backend(tmp_path):
    """Window layers in rings and a full-attention layer in its reservation, each through its
    own group's (start slot, ring length) table: the Triton ring and plain contiguous variants
    give the torch backend's tokens, prompts written whole and chunked."""
    from tests.models.test_config_fields import make_checkpoint

    make_checkpoint(tmp_path, "Qwen2Config", num_hidden_layers=2, use_sliding_window=True,
                    sliding_window=6, max_window_layers=0,
                    layer_types=["sliding_attention", "full_attention"])
    prompts = random_prompts(2, 512, seed=7, min_len=18, max_len=26)
    for chunking in ({}, dict(max_num_batched_tokens=8, chunked_prefill=True)):
        common = dict(model=str(tmp_path), strategy="contiguous", kv_memory="1MiB",
                      max_model_len=48, **chunking)
        torch_tokens = kvbench.generate(prompts, 10, attention_backend="torch", **common)
        assert kvbench.generate(prompts, 10, attention_backend="triton",
                                **common) == torch_tokens
