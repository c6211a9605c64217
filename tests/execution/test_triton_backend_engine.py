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
