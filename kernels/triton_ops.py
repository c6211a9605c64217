"""Triton kernels behind the same API as `kvbench.kernels.reference` (the GPU attention backend).

``ops = importlib.import_module("kvbench.kernels.triton_ops")`` exposes ``write_kv``,
``paged_attention``, ``contiguous_attention``, ``paged_decode_attention`` and
``contiguous_decode_attention`` with the reference signatures (plus keyword-only tuning
extras at the end), and re-exports the reference's fp8 helpers. Importing this module
imports triton and raises ``ImportError`` where it is not installed.

Tensors must be on a CUDA device, or on the CPU when ``TRITON_INTERPRET=1`` was set before
triton was imported (the interpreter: correct but slow, for tests on tiny shapes).

Numerics: softmax and accumulation are float32. With 16-bit queries on a GPU the matmul
operands are fed to ``tl.dot`` in the query's dtype (fp8 K/V are exact in bf16/fp16; the
softmax probabilities are rounded to it before P @ V, as in flash attention), accumulating in
float32. With float32 queries or caches, and always in the interpreter, operands are float32
and ``tl.dot`` runs in IEEE float32. Sequences of length 0 give zeros.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from kvbench.errors import KvbenchInputError

from .reference import (  # noqa: F401  (re-exported: this module mirrors reference.py)
    FP8_DTYPE,
    FP8_MAX,
    Scale,
    contiguous_slots,
    dequantize,
    is_fp8,
    paged_slots,
    quantize_fp8,
)
from .triton_decode import _decode_kernel, _merge_splits_kernel
from .triton_kv_write import _write_kv_kernel
from .triton_prefill import _prefill_kernel

__all__ = [
    "write_kv",
    "paged_attention",
    "contiguous_attention",
    "paged_decode_attention",
    "contiguous_decode_attention",
    "choose_num_splits",
]

# Flash-decoding heuristic (see choose_num_splits).
SPLIT_MIN_CONTEXT = 512  # never split contexts shorter than this
SPLIT_MIN_TOKENS = 256  # each split gets at least this many tokens
SPLIT_MAX = 32
INTERPRETER_SMS = 4  # stand-in SM count on the CPU interpreter


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check_device(t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        return
    if t.device.type == "cpu" and _interpreting():
        return
    raise KvbenchInputError(
        f"Triton kernels need CUDA tensors (got {t.device}); on the CPU set TRITON_INTERPRET=1 "
        "before importing triton, or use the torch backend"
    )


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _on_gpu(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


@functools.lru_cache(maxsize=64)
def _const_scale(value: float, device: torch.device) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.float32, device=device)


def _scale_arg(scale: Scale, num_kv_heads: int, device: torch.device) -> tuple[torch.Tensor, bool]:
    """A scale as a float32 1-d tensor on `device` and whether it is per KV head."""
    if scale is None:
        return _const_scale(1.0, device), False
    if not isinstance(scale, torch.Tensor):
        return _const_scale(float(scale), device), False
    t = scale.to(device=device, dtype=torch.float32).reshape(-1)
    if t.numel() == 1:
        return t, False
    if t.numel() == num_kv_heads:
        return t.contiguous(), True
    raise ValueError(f"scale has {t.numel()} elements; expected 1 or num_kv_heads={num_kv_heads}")


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, head_dim: int) -> None:
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.dim() != 3 or c.shape[-1] != head_dim:
            raise ValueError(f"{name} must be [num_slots, num_kv_heads, {head_dim}], got {tuple(c.shape)}")
        if c.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride in head_dim")
    if k_cache.dtype != v_cache.dtype or k_cache.shape != v_cache.shape:
        raise ValueError("k_cache and v_cache must have the same shape and dtype")


def _unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _dot_fp32(q: torch.Tensor, cache: torch.Tensor) -> bool:
    return (not _on_gpu(q)) or q.dtype == torch.float32 or cache.dtype == torch.float32


def _block_n(head_dim: int, on_gpu: bool, dot_fp32: bool, block_n: int | None) -> int:
    """K/V tokens per loop iteration (independent of the cache block size)."""
    if block_n is not None:
        if block_n < 16 or block_n & (block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {block_n}")
        return block_n
    if not on_gpu:
        return 16  # the interpreter: small tiles, several loop iterations even on tiny contexts
    # float32 operands take twice the registers: smaller tiles avoid spills at head_dim 128.
    return 64 if head_dim <= 128 and not dot_fp32 else 32


# ----------------------------------------------------------------------------------------------
# KV write


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: Scale = None,
    v_scale: Scale = None,
) -> None:
    """Scatter new tokens' K/V `[T, Hkv, D]` into their slots ("reshape and cache").

    Slots < 0 are skipped. fp8 caches receive exactly `reference.quantize_fp8(k, k_scale)`.
    """
    num_tokens, num_kv_heads, head_dim = k.shape
    _check_cache(k_cache, v_cache, head_dim)
    if num_tokens == 0:
        return
    _check_device(k)
    k = _unit_last_stride(k)
    v = _unit_last_stride(v)
    fp8 = is_fp8(k_cache)
    ks, per_head = _scale_arg(k_scale if fp8 else None, num_kv_heads, k.device)
    vs, _ = _scale_arg(v_scale if fp8 else None, num_kv_heads, k.device)
    if fp8 and (ks.numel() == 1) != (vs.numel() == 1):
        # Mixed granularity: give both per-head scales.
        ks = ks.expand(num_kv_heads).contiguous()
        vs = vs.expand(num_kv_heads).contiguous()
        per_head = True
    slot_mapping = slot_mapping.contiguous()
    kc = k_cache.view(torch.uint8) if fp8 else k_cache
    vc = v_cache.view(torch.uint8) if fp8 else v_cache
    block_d = _next_pow2(head_dim)
    block_h = min(_next_pow2(num_kv_heads), max(1, 4096 // block_d))
    grid = (num_tokens, triton.cdiv(num_kv_heads, block_h))
    _write_kv_kernel[grid](
        k, v, kc, vc, slot_mapping, ks, vs,
        num_kv_heads,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kc.stride(0), kc.stride(1), vc.stride(0), vc.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_H=block_h,
        FP8=fp8, PER_HEAD_SCALE=per_head,
        SAME_DTYPE=(k.dtype == k_cache.dtype and v.dtype == v_cache.dtype),
    )


# ----------------------------------------------------------------------------------------------
# Attention helpers


def _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, device):
    fp8 = is_fp8(k_cache)
    if not fp8:
        one = _const_scale(1.0, device)
        return one, one, False, False
    ks, k_ph = _scale_arg(k_scale, num_kv_heads, device)
    vs, v_ph = _scale_arg(v_scale, num_kv_heads, device)
    if k_ph != v_ph:
        ks = ks.expand(num_kv_heads).contiguous()
        vs = vs.expand(num_kv_heads).contiguous()
    return ks, vs, True, k_ph or v_ph


@functools.lru_cache(maxsize=16)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SMS


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int,
                      device: torch.device) -> int:
    """How many programs share one sequence's context in decode (1: no split-K).

    Splitting pays when the (sequence, KV head) programs alone cannot fill the GPU and the
    contexts are long: aim for about two programs per SM, with at least `SPLIT_MIN_TOKENS`
    tokens per split and never for contexts under `SPLIT_MIN_CONTEXT`.
    """
    if max_seq_len < SPLIT_MIN_CONTEXT:
        return 1
    sms = _sm_count(device)
    programs = max(1, num_seqs * num_kv_heads)
    want = triton.cdiv(2 * sms, programs)
    by_length = triton.cdiv(max_seq_len, SPLIT_MIN_TOKENS)
    return max(1, min(want, by_length, SPLIT_MAX))


def _decode(q, k_cache, v_cache, table, paged, seq_lens, block_size, softmax_scale,
            k_scale, v_scale, num_splits, max_seq_len, block_n):
    num_seqs, num_q_heads, head_dim = q.shape
    _check_cache(k_cache, v_cache, head_dim)
    num_kv_heads = k_cache.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    _check_device(q)
    q = _unit_last_stride(q)
    table = _unit_last_stride(table)
    seq_lens = seq_lens.contiguous()
    group = num_q_heads // num_kv_heads
    ks, vs, fp8, per_head = _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, q.device)
    dot_fp32 = _dot_fp32(q, k_cache)
    bn = _block_n(head_dim, _on_gpu(q), dot_fp32, block_n)
    if num_splits is None:
        if max_seq_len is None:
            max_seq_len = int(seq_lens.max())
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, q.device)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    split = num_splits > 1
    block_d = max(16, _next_pow2(head_dim))
    common = dict(
        GROUP=group, BLOCK_G=max(16, _next_pow2(group)),
        HEAD_DIM=head_dim, BLOCK_D=block_d,
        BLOCK_N=bn, BLOCK_SIZE=block_size if paged else 1,
        PAGED=paged, SPLIT=split,
        FP8=fp8, PER_HEAD_SCALE=per_head, DOT_FP32=dot_fp32,
    )
    stride_table = table.stride(0) if paged else 0
    grid = (num_seqs, num_kv_heads, num_splits)
    if not split:
        _decode_kernel[grid](
            q, k_cache, v_cache, ks, vs, table, seq_lens,
            out, out, out,
            softmax_scale, 1,
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
            stride_table,
            out.stride(0), out.stride(1), 0,
            0, 0,
            **common,
        )
        return out
    partial = torch.empty((num_seqs, num_q_heads, num_splits, head_dim), dtype=torch.float32,
                          device=q.device)
    m = torch.empty((num_seqs, num_q_heads, num_splits), dtype=torch.float32, device=q.device)
    sums = torch.empty_like(m)
    _decode_kernel[grid](
        q, k_cache, v_cache, ks, vs, table, seq_lens,
        partial, m, sums,
        softmax_scale, num_splits,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        stride_table,
        partial.stride(0), partial.stride(1), partial.stride(2),
        m.stride(0), m.stride(1),
        **common,
    )
    _merge_splits_kernel[(num_seqs, num_q_heads)](
        partial, m, sums, out, num_splits,
        partial.stride(0), partial.stride(1), partial.stride(2),
        m.stride(0), m.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_SPLITS=max(2, _next_pow2(num_splits)),
    )
    return out


def _prefill(q, k_cache, v_cache, table, paged, query_start_loc, seq_lens, block_size,
             softmax_scale, k_scale, v_scale, max_query_len, block_m, block_n):
    num_tokens, num_q_heads, head_dim = q.shape
    _check_cache(k_cache, v_cache, head_dim)
    num_kv_heads = k_cache.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out
    _check_device(q)
    q = _unit_last_stride(q)
    table = _unit_last_stride(table)
    seq_lens = seq_lens.contiguous()
    query_start_loc = query_start_loc.contiguous()
    group = num_q_heads // num_kv_heads
    ks, vs, fp8, per_head = _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, q.device)
    on_gpu = _on_gpu(q)
    dot_fp32 = _dot_fp32(q, k_cache)
    bn = _block_n(head_dim, on_gpu, dot_fp32, block_n)
    if block_m is None:
        block_m = 16 if not on_gpu else (32 if dot_fp32 or head_dim > 128 else 64)
    block_g = _next_pow2(group)
    block_q = max(1, block_m // block_g, triton.cdiv(16, block_g))
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    if max_query_len <= 0:
        return out
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, ks, vs, table, query_start_loc, seq_lens, out,
        softmax_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        table.stride(0) if paged else 0,
        out.stride(0), out.stride(1),
        GROUP=group, BLOCK_G=block_g, BLOCK_Q=block_q,
        HEAD_DIM=head_dim, BLOCK_D=max(16, _next_pow2(head_dim)),
        BLOCK_N=bn, BLOCK_SIZE=block_size if paged else 1,
        PAGED=paged, FP8=fp8, PER_HEAD_SCALE=per_head, DOT_FP32=dot_fp32,
    )
    return out


# ----------------------------------------------------------------------------------------------
# Public API (signatures of kvbench.kernels.reference; extras are keyword-only, at the end)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Varlen causal attention (prefill, chunked prefill, prefix hits) through block tables.

    `max_query_len` (longest `q_len` in the batch) avoids a device sync when given.
    """
    return _prefill(q, k_cache, v_cache, block_tables, True, query_start_loc, seq_lens,
                    block_size, softmax_scale, k_scale, v_scale, max_query_len, block_m, block_n)


def contiguous_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_slots: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Varlen causal attention reading each sequence from `[start_slot, start_slot + len)`."""
    return _prefill(q, k_cache, v_cache, start_slots, False, query_start_loc, seq_lens,
                    1, softmax_scale, k_scale, v_scale, max_query_len, block_m, block_n)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the cache.

    `num_splits`: split-K (flash decoding) factor; None picks it from the context length
    (`choose_num_splits`), 1 disables it. `max_seq_len` avoids a device sync when given.
    """
    return _decode(q, k_cache, v_cache, block_tables, True, seq_lens, block_size, softmax_scale,
                   k_scale, v_scale, num_splits, max_seq_len, block_n)


def contiguous_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_slots: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Decode reading each sequence's K/V from `[start_slot, start_slot + seq_len)`."""
    return _decode(q, k_cache, v_cache, start_slots, False, seq_lens, 1, softmax_scale,
                   k_scale, v_scale, num_splits, max_seq_len, block_n)
