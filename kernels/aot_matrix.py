"""The ahead-of-time build matrix: the shapes CI compiles for every target (no triton import,
so tests can name their cases at collection time)."""

from __future__ import annotations

import torch

from .attention_shape import AttentionShape
from .reference import FP8_DTYPE

ARCHS = (80, 86, 89, 90)
# The score-variant and latent-attention cases build for A100 and H100/H200 only: one model
# shape each, so they add a few cases rather than multiplying the matrix.
VARIANT_ARCHS = (80, 90)


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
        (bf16, bf16, "none", 256, 4),  # Gemma-3-12B's head size
        (fp16, fp16, "none", 256, 8),  # Qwen3-Next's attention: 8 query heads per KV head
        (bf16, FP8_DTYPE, "scalar", 128, 4),
        (bf16, FP8_DTYPE, "per_head", 128, 8),
        (fp16, FP8_DTYPE, "per_head", 64, 1),
        (bf16, FP8_DTYPE, "scalar", 256, 4),
        (fp32, fp32, "none", 128, 4),
        (fp32, fp32, "none", 256, 4),  # the widest rows: the most shared memory per tile
        (fp32, FP8_DTYPE, "scalar", 128, 4),
        (fp32, FP8_DTYPE, "scalar", 256, 4),
    ]
    names = {bf16: "bf16", fp16: "fp16", fp32: "fp32", FP8_DTYPE: "fp8"}
    out = {}
    for q_dtype, cache_dtype, scale_kind, head_dim, group in rows:
        cache = names[cache_dtype] + ("" if scale_kind == "none" else f"-{scale_kind}")
        case = f"q{names[q_dtype]}-kv{cache}-d{head_dim}-g{group}"
        out[case] = AttentionShape(num_q_heads=8 * group, num_kv_heads=8, head_dim=head_dim,
                                   dtype=q_dtype, cache_dtype=cache_dtype, block_size=16,
                                   scale_kind=scale_kind)
    return out | variant_matrix()


def variant_matrix():
    """``{case id: AttentionShape}`` of the score variants and latent attention, one model
    shape each (built for `VARIANT_ARCHS`)."""
    bf16 = torch.bfloat16
    both = (False, True)  # hybrid: full-attention and sliding-window layers
    return {
        # Gemma-2-27B: 32 q / 16 KV heads of 128, attention soft-capping, every other layer local.
        "gemma2-qbf16-kvbf16-d128-g2-softcap": AttentionShape(
            32, 16, 128, bf16, bf16, window_kinds=both, softcap=True),
        # Gemma-2-9B: 16 q / 8 KV heads of 256, soft-capping, every other layer local.
        "gemma2-qbf16-kvbf16-d256-g2-softcap": AttentionShape(
            16, 8, 256, bf16, bf16, window_kinds=both, softcap=True),
        # gpt-oss-120b: 64 q / 8 KV heads of 64, sinks, alternating windows; an fp8 cache.
        "gptoss-qbf16-kvfp8-scalar-d64-g8-sinks": AttentionShape(
            64, 8, 64, bf16, FP8_DTYPE, scale_kind="scalar", window_kinds=both, sinks=True),
        # DeepSeek-V3 at tensor parallel 8: 16 heads over one 512 + 64 latent row.
        "deepseekv3-mla-qbf16-kvbf16-d576": AttentionShape(
            16, 1, 576, bf16, bf16, kv_lora_rank=512),
        "deepseekv3-mla-qbf16-kvfp8-scalar-d576": AttentionShape(
            16, 1, 576, bf16, FP8_DTYPE, scale_kind="scalar", kv_lora_rank=512),
    }


def case_archs(case: str) -> tuple[int, ...]:
    """The targets case `case` is built for."""
    return VARIANT_ARCHS if case in variant_matrix() else ARCHS
