"""Triton varlen causal prefill attention over a paged or contiguous KV cache.

Sequence ``i`` owns queries ``q[query_start_loc[i]:query_start_loc[i+1]]``: the last
``q_len`` of its ``seq_lens[i]`` tokens, whose K/V are already in the cache. A query at
position ``p`` attends to positions ``0..p`` (the cached prefix plus the new tokens up to
itself). Batches are packed without padding.

Grid: (sequence, query tile, KV head). A program's ``BLOCK_M`` rows are ``BLOCK_Q`` query
tokens x ``BLOCK_G`` query heads of one GQA group (row ``r``: token ``r // BLOCK_G``, head
``r % BLOCK_G``), so every K/V tile read serves the whole group. The loop over K/V stops at
the tile's last query position (causal). ``PAGED`` selects block-table or start-slot
addressing, exactly as in the decode kernel.

The score variants are the decode kernel's (``WINDOW``, ``SOFTCAP``, ``SINKS``; see
`kvbench.kernels.triton_decode`). With a window the K/V loop of a tile starts at the first key
its first query sees, so a long prompt's tile reads about W + BLOCK_Q keys, and no block-table
entry before it is loaded; a row can then meet a tile with no key in its window, which the
softmax update guards (``MAY_BE_EMPTY``).

Importing this module imports triton (``ImportError`` when it is missing).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_decode import (
    INTERPRETED,
    attend_tile,
    cast_rne,
    fold_sinks,
    kv_head_scale,
    score_scales,
    sequence_row,
)


# Per-step arguments and the window are not specialized (see _decode_kernel).
@triton.jit(do_not_specialize=["stride_table", "window"],
            do_not_specialize_on_alignment=["table_ptr", "query_start_loc_ptr", "seq_lens_ptr",
                                            "sinks_ptr"])
def _prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr,
    table_ptr, query_start_loc_ptr, seq_lens_ptr, out_ptr, sinks_ptr,
    softmax_scale, window, softcap,
    stride_q_tok, stride_q_head,
    stride_k_slot, stride_k_head, stride_v_slot, stride_v_head,
    stride_table,
    stride_o_tok, stride_o_head,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    PAGED: tl.constexpr, FP8: tl.constexpr, PER_HEAD_SCALE: tl.constexpr,
    DOT_FP32: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, SINKS: tl.constexpr,
    RING: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_Q * BLOCK_G
    seq = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq).to(tl.int32)
    q_len = tl.load(query_start_loc_ptr + seq + 1).to(tl.int32) - q_start
    tile_start = q_tile * BLOCK_Q
    if tile_start >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    prefix_len = seq_len - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    tok = tile_start + offs_m // BLOCK_G
    g = offs_m % BLOCK_G
    row_mask = (tok < q_len) & (g < GROUP)
    heads = kv_head * GROUP + g
    q_pos = prefix_len + tok

    rows = (q_start + tok).to(tl.int64)
    q_rows = q_ptr + rows[:, None] * stride_q_tok + heads[:, None] * stride_q_head

    qk_scale, softcap_arg = score_scales(softmax_scale, softcap, k_scale_ptr, kv_head,
                                         FP8, PER_HEAD_SCALE, SOFTCAP)

    table_row = sequence_row(table_ptr, seq, stride_table, PAGED, RING)
    k_head_off = kv_head * stride_k_head
    v_head_off = kv_head * stride_v_head

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys beyond the tile's last query position are masked for every row: stop there.
    kv_end = tl.minimum(seq_len, prefix_len + tile_start + BLOCK_Q)
    # Keys before the window of the tile's first query are masked for every row: start there.
    if WINDOW:
        kv_start = tl.maximum(prefix_len + tile_start - window + 1, 0)
    else:
        kv_start = 0
    if INTERPRETED:  # see INTERPRETED in triton_decode
        n0 = kv_start
        while n0 < kv_end:
            m_i, l_i, acc = attend_tile(
                n0, kv_end, q_rows, row_mask, q_pos, qk_scale, table_row, k_cache_ptr,
                v_cache_ptr, stride_k_slot, stride_v_slot, k_head_off, v_head_off, offs_d,
                d_mask, m_i, l_i, acc, window, softcap_arg, HEAD_DIM, BLOCK_D, BLOCK_DK,
                BLOCK_N, BLOCK_SIZE, PAGED, FP8, DOT_FP32, True, WINDOW, SOFTCAP, RING)
            n0 += BLOCK_N
    else:
        for n0 in range(kv_start, kv_end, BLOCK_N):
            m_i, l_i, acc = attend_tile(
                n0, kv_end, q_rows, row_mask, q_pos, qk_scale, table_row, k_cache_ptr,
                v_cache_ptr, stride_k_slot, stride_v_slot, k_head_off, v_head_off, offs_d,
                d_mask, m_i, l_i, acc, window, softcap_arg, HEAD_DIM, BLOCK_D, BLOCK_DK,
                BLOCK_N, BLOCK_SIZE, PAGED, FP8, DOT_FP32, True, WINDOW, SOFTCAP, RING)

    if SINKS:
        m_i, l_i, acc = fold_sinks(sinks_ptr, heads, g < GROUP, m_i, l_i, acc)
    if FP8:
        acc = acc * kv_head_scale(v_scale_ptr, kv_head, PER_HEAD_SCALE)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + rows[:, None] * stride_o_tok + heads[:, None] * stride_o_head + offs_d[None, :]
    tl.store(o_ptrs, cast_rne(out, out_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
