"""Triton KV write ("reshape and cache"): scatter ``[T, Hkv, D]`` K/V rows into cache slots.

fp8 caches get ``x / scale`` (correctly rounded division) saturated to +-448 and rounded to
nearest-even ``float8_e4m3fn``, bit for bit what ``reference.quantize_fp8`` produces. The
e4m3 encoding is computed with integer arithmetic and stored through a ``uint8`` view of the
cache: this gives the same bits on every GPU and under ``TRITON_INTERPRET=1`` (whose own
float32 -> fp8 cast mis-rounds values that carry into the next binade, e.g. -127.99).

Slots < 0 are skipped (padding tokens).

Importing this module imports triton (``ImportError`` when it is missing).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_decode import cast_rne


@triton.jit
def fp32_to_e4m3_bits(x):
    """float8_e4m3fn bit patterns (uint32) of float32 ``x``: saturated to +-448, round to nearest
    even, NaN kept; i.e. ``x.clamp(-448, 448).to(torch.float8_e4m3fn)``."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    a = mag.to(tl.float32, bitcast=True)
    # Normal range (>= 2^-6): drop 20 mantissa bits with round-half-even, rebias 127 -> 7.
    rounded = (mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20
    normal = rounded - (120 << 3)
    # Subnormals (multiples of 2^-9): adding 2^14, whose fp32 ulp is 2^-9, rounds a to that
    # grid (half-even); the low mantissa bits are then the e4m3 code (8 means 2^-6, also right).
    sub = (a + 16384.0).to(tl.uint32, bitcast=True) - (141 << 23)
    code = tl.where(a < 0.015625, sub, normal)
    code = tl.where(a > 448.0, 0x7E, code)  # saturate (inf included)
    code = tl.where(a != a, 0x7F, code)  # NaN stays NaN
    return code | sign


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
    num_kv_heads,
    stride_k_tok, stride_k_head, stride_v_tok, stride_v_head,
    stride_kc_slot, stride_kc_head, stride_vc_slot, stride_vc_head,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr,
    FP8: tl.constexpr, PER_HEAD_SCALE: tl.constexpr, SAME_DTYPE: tl.constexpr,
):
    tok = tl.program_id(0)
    head_block = tl.program_id(1)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    offs_h = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h < num_kv_heads)[:, None] & (offs_d < HEAD_DIM)[None, :]
    tok64 = tok.to(tl.int64)

    k_src = k_ptr + tok64 * stride_k_tok + offs_h[:, None] * stride_k_head + offs_d[None, :]
    v_src = v_ptr + tok64 * stride_v_tok + offs_h[:, None] * stride_v_head + offs_d[None, :]
    k_dst = k_cache_ptr + slot * stride_kc_slot + offs_h[:, None] * stride_kc_head + offs_d[None, :]
    v_dst = v_cache_ptr + slot * stride_vc_slot + offs_h[:, None] * stride_vc_head + offs_d[None, :]
    k = tl.load(k_src, mask=mask, other=0.0)
    v = tl.load(v_src, mask=mask, other=0.0)

    if FP8:
        if PER_HEAD_SCALE:
            ks = tl.load(k_scale_ptr + offs_h, mask=offs_h < num_kv_heads, other=1.0)[:, None]
            vs = tl.load(v_scale_ptr + offs_h, mask=offs_h < num_kv_heads, other=1.0)[:, None]
        else:
            ks = tl.load(k_scale_ptr)
            vs = tl.load(v_scale_ptr)
        kq = fp32_to_e4m3_bits(tl.div_rn(k.to(tl.float32), ks))
        vq = fp32_to_e4m3_bits(tl.div_rn(v.to(tl.float32), vs))
        # The caches are passed as uint8 views.
        tl.store(k_dst, kq.to(tl.uint8), mask=mask)
        tl.store(v_dst, vq.to(tl.uint8), mask=mask)
    elif SAME_DTYPE:
        tl.store(k_dst, k, mask=mask)
        tl.store(v_dst, v, mask=mask)
    else:
        # Through float32 (exact for any 16-bit input) then rounded once to the cache dtype.
        tl.store(k_dst, cast_rne(k.to(tl.float32), k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_dst, cast_rne(v.to(tl.float32), v_cache_ptr.dtype.element_ty), mask=mask)
