"""`AttentionShape`: what fixes the kernel variants of a run (no triton import here)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .reference import FP8_DTYPE

SCALE_KINDS = ("none", "scalar", "per_head")


@dataclass(frozen=True)
class AttentionShape:
    """What fixes a run's kernel variants: heads, head size, dtypes, cache block size and
    (fp8 caches) the scale granularity ``"scalar"`` or ``"per_head"``.

    The score variants a model's layers use (each a compiled variant of its own):
    ``window_kinds``, the kinds of layer by window (``False`` full attention, ``True`` a
    sliding window; a Gemma-style hybrid has both), ``softcap`` and ``sinks``.
    ``kv_lora_rank`` set means latent attention (MLA): one cache "head" of ``head_dim`` =
    latent + rope dims, whose first ``kv_lora_rank`` dims are the values.
    """

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    cache_dtype: torch.dtype
    block_size: int = 16
    scale_kind: str = "none"
    window_kinds: tuple[bool, ...] = (False,)
    softcap: bool = False
    sinks: bool = False
    kv_lora_rank: int | None = None

    def __post_init__(self) -> None:
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads")
        fp8 = self.cache_dtype == FP8_DTYPE
        if fp8 == (self.scale_kind == "none") or self.scale_kind not in SCALE_KINDS:
            raise ValueError(f"scale_kind {self.scale_kind!r} does not fit cache {self.cache_dtype}")
        if not self.window_kinds or len(set(self.window_kinds)) != len(self.window_kinds):
            raise ValueError(f"window_kinds must list False and/or True once, got "
                             f"{self.window_kinds}")
        if self.kv_lora_rank is not None:
            if self.num_kv_heads != 1 or not 0 < self.kv_lora_rank < self.head_dim:
                raise ValueError("latent attention needs one KV head and 0 < kv_lora_rank < "
                                 "head_dim")
            if self.softcap or self.sinks or self.window_kinds != (False,):
                raise ValueError("latent attention has no window, soft cap or sinks variant")
