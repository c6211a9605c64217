"""Triton decode for multi-head latent attention (DeepSeek-V2/V3), paged or contiguous.

The cache holds one row per token: the compressed latent (``LORA_DIM``, 512 for DeepSeek-V3)
then the shared rope key (``ROPE_DIM``, 64), ``[num_slots, 1, LORA_DIM + ROPE_DIM]``. With the
key up-projection absorbed into the query (``q`` ``[S, H, LORA_DIM + ROPE_DIM]``) a score is
``q_latent . latent + q_rope . rope_key``, and the value is the latent itself, so one tile load
serves both ``Q K^T`` and ``P V``; the output ``[S, H, LORA_DIM]`` is still in latent space (the
caller applies the value up-projection). 576 is not a power of two, so the dot product is split
into its two parts (``tl.dot`` tiles are powers of two), as vLLM's Triton MLA decode does.

Every query head reads the same single latent "head": a program owns ``BLOCK_H`` query heads
of one (sequence, split), so the ``[BLOCK_H, LORA_DIM]`` float32 accumulator fits in registers
(all 128 heads in one program would not). Split-K, the online softmax, fp8 decoding and the
slot addressing are the dense decode kernel's (`kvbench.kernels.triton_decode`), and the split
partials go through its merge kernel.

Importing this module imports triton (``ImportError`` when it is missing).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_decode import (
    INTERPRETED,
    LOG2E,
    cast_rne,
    kv_head_scale,
    load_kv_tile,
    online_softmax_update,
    sequence_row,
    tile_scores,
    token_slots,
)


@triton.jit
def _mla_tile(n0, end, q_lat, q_rope, qk_scale, table_row, cache_ptr, stride_slot, offs_l,
              l_mask, offs_r, r_mask, m_i, l_i, acc, LORA_DIM: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr, PAGED: tl.constexpr,
              FP8: tl.constexpr, DOT_FP32: tl.constexpr):
    """Fold the cache rows of positions ``[n0, min(n0 + BLOCK_N, end))`` into the softmax."""
    pos = n0 + tl.arange(0, BLOCK_N)
    tok_mask = pos < end
    slots = token_slots(table_row, pos, tok_mask, BLOCK_SIZE, PAGED, False)
    latent = load_kv_tile(cache_ptr, slots, stride_slot, 0, offs_l,
                          tok_mask[:, None] & l_mask[None, :], DOT_FP32, q_lat.dtype, FP8)
    rope = load_kv_tile(cache_ptr, slots, stride_slot, LORA_DIM, offs_r,
                        tok_mask[:, None] & r_mask[None, :], DOT_FP32, q_lat.dtype, FP8)
    s = tile_scores(q_lat, latent, DOT_FP32) + tile_scores(q_rope, rope, DOT_FP32)
    s = tl.where(tok_mask[None, :], s * qk_scale, float("-inf"))
    # Every tile holds at least one real token, so the running max stays finite.
    return online_softmax_update(s, latent, m_i, l_i, acc, DOT_FP32, False)


# Per-step arguments are not specialized (see _decode_kernel).
@triton.jit(do_not_specialize=["num_splits", "stride_table"],
            do_not_specialize_on_alignment=["table_ptr", "seq_lens_ptr"])
def _mla_decode_kernel(
    q_ptr, cache_ptr, k_scale_ptr, v_scale_ptr,
    table_ptr, seq_lens_ptr,
    out_ptr, m_ptr, l_ptr,
    softmax_scale, num_splits,
    stride_q_seq, stride_q_head, stride_c_slot,
    stride_table,
    stride_o_seq, stride_o_head, stride_o_split,
    stride_ml_seq, stride_ml_head,
    NUM_HEADS: tl.constexpr, BLOCK_H: tl.constexpr,
    LORA_DIM: tl.constexpr, BLOCK_L: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    PAGED: tl.constexpr, SPLIT: tl.constexpr, FP8: tl.constexpr, DOT_FP32: tl.constexpr,
):
    seq = tl.program_id(0)
    head_block = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    if SPLIT:
        chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
        start = split * chunk
        end = tl.minimum(seq_len, start + chunk)
    else:
        start = 0
        end = seq_len

    heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = heads < NUM_HEADS
    offs_l = tl.arange(0, BLOCK_L)
    offs_r = tl.arange(0, BLOCK_R)
    l_mask = offs_l < LORA_DIM
    r_mask = offs_r < ROPE_DIM

    q_rows = q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head
    q_lat = tl.load(q_rows + offs_l[None, :], mask=h_mask[:, None] & l_mask[None, :], other=0.0)
    q_rope = tl.load(q_rows + LORA_DIM + offs_r[None, :], mask=h_mask[:, None] & r_mask[None, :],
                     other=0.0)
    if DOT_FP32:
        q_lat = q_lat.to(tl.float32)
        q_rope = q_rope.to(tl.float32)
    else:
        q_rope = q_rope.to(q_lat.dtype)

    # One latent head: an fp8 scale is the tensor's single one.
    qk_scale = softmax_scale * LOG2E
    if FP8:
        qk_scale = qk_scale * kv_head_scale(k_scale_ptr, 0, False)
    table_row = sequence_row(table_ptr, seq, stride_table, PAGED, False)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_L], dtype=tl.float32)

    if INTERPRETED:  # see INTERPRETED in triton_decode
        n0 = start
        while n0 < end:
            m_i, l_i, acc = _mla_tile(
                n0, end, q_lat, q_rope, qk_scale, table_row, cache_ptr, stride_c_slot, offs_l,
                l_mask, offs_r, r_mask, m_i, l_i, acc, LORA_DIM, BLOCK_N, BLOCK_SIZE, PAGED, FP8,
                DOT_FP32)
            n0 += BLOCK_N
    else:
        for n0 in range(start, end, BLOCK_N):
            m_i, l_i, acc = _mla_tile(
                n0, end, q_lat, q_rope, qk_scale, table_row, cache_ptr, stride_c_slot, offs_l,
                l_mask, offs_r, r_mask, m_i, l_i, acc, LORA_DIM, BLOCK_N, BLOCK_SIZE, PAGED, FP8,
                DOT_FP32)

    if FP8:
        acc = acc * kv_head_scale(v_scale_ptr, 0, False)

    out_mask = h_mask[:, None] & l_mask[None, :]
    if SPLIT:
        o_ptrs = (out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head
                  + split * stride_o_split + offs_l[None, :])
        tl.store(o_ptrs, acc, mask=out_mask)
        ml_off = seq * stride_ml_seq + heads * stride_ml_head + split
        tl.store(m_ptr + ml_off, m_i, mask=h_mask)
        tl.store(l_ptr + ml_off, l_i, mask=h_mask)
    else:
        # An empty sequence (seq_len 0) yields zeros rather than 0/0.
        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        o_ptrs = out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head + offs_l[None, :]
        tl.store(o_ptrs, cast_rne(out, out_ptr.dtype.element_ty), mask=out_mask)
