"""The ahead-of-time build matrix: the shapes CI compiles for every target (no triton import,
so tests can name their cases at collection time)."""

from __future__ import annotations

import torch

from .attention_shape import AttentionShape
from .reference import FP8_DTYPE

ARCHS = (80, 86, 89, 90)


def matrix():
    """``{case id: AttentionShape}``: the dtypes, head dims, GQA groups and fp8 scale kinds
    the wrappers meet; each shape expands to every layout x split choice (`shape_launches`)."""
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    rows = [
        # (q dtype, cache dtype, scale kind, head_dim, GQA group)
        (bf16, bf16, "none", 128, 4),  # Llama-3-8B
        (bf16, bf16, "none", 128, 8),
        (bf16, bf16, "none", 64, 1),
        (fp16, fp16, "none", 128, 4),
        (bf16, bf16, "none", 80, 4),
        (bf16, bf16, "none", 256, 4),
        (bf16, FP8_DTYPE, "scalar", 128, 4),
        (bf16, FP8_DTYPE, "per_head", 128, 8),
        (fp16, FP8_DTYPE, "per_head", 64, 1),
        (bf16, FP8_DTYPE, "scalar", 256, 4),
        (fp32, fp32, "none", 128, 4),
        (fp32, fp32, "none", 256, 4),  # the widest rows: the most shared memory per tile
        (fp32, FP8_DTYPE, "scalar", 128, 4),
    ]
    names = {bf16: "bf16", fp16: "fp16", fp32: "fp32", FP8_DTYPE: "fp8"}
    out = {}
    for q_dtype, cache_dtype, scale_kind, head_dim, group in rows:
        cache = names[cache_dtype] + ("" if scale_kind == "none" else f"-{scale_kind}")
        case = f"q{names[q_dtype]}-kv{cache}-d{head_dim}-g{group}"
        out[case] = AttentionShape(num_q_heads=8 * group, num_kv_heads=8, head_dim=head_dim,
                                   dtype=q_dtype, cache_dtype=cache_dtype, block_size=16,
                                   scale_kind=scale_kind)
    return out
