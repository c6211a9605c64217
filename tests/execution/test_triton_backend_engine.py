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
