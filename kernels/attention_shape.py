"""`AttentionShape`: what fixes the kernel variants of a run (no triton import here)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .reference import FP8_DTYPE

SCALE_KINDS = ("none", "scalar", "per_head")


@dataclass(frozen=True)
class AttentionShape:
    """What fixes a run's kernel variants: heads, head size, dtypes, cache block size and
    (fp8 caches) the scale granularity ``"scalar"`` or ``"per_head"``."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    cache_dtype: torch.dtype
    block_size: int = 16
    scale_kind: str = "none"

    def __post_init__(self) -> None:
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads")
        fp8 = self.cache_dtype == FP8_DTYPE
        if fp8 == (self.scale_kind == "none") or self.scale_kind not in SCALE_KINDS:
            raise ValueError(f"scale_kind {self.scale_kind!r} does not fit cache {self.cache_dtype}")
