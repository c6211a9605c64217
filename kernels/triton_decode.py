"""Triton decode attention: one query token per sequence, paged or contiguous KV cache.

One kernel body serves both cache layouts; the constexpr ``PAGED`` only changes how a token's
slot is found (``block_table[pos // block_size] * block_size + pos % block_size`` versus
``start_slot + pos``), so the paged/contiguous difference measured is the indirection alone.

Each program owns one (sequence, KV head, split) and all query heads of that KV head's GQA
group (padded to at least 16 rows for ``tl.dot``), so every K/V tile is read once per group.
Softmax is online (running max / sum, base 2). With ``num_splits > 1`` (flash decoding) the
context of every sequence is cut into ``num_splits`` chunks handled by separate programs that
write unnormalised partial outputs plus their running max and sum; a second small kernel
merges them. fp8 caches are dequantized on load: the per-tensor or per-KV-head scale is a
constant in a program, so it is folded into the score scale (K) and the output (V).

Score variants (`kvbench.kernels.reference`'s semantics), each a constexpr flag so the plain
path compiles exactly as without them; their values are runtime arguments (a window length or
a cap never compiles a new variant):

- ``WINDOW`` (length ``window``): the query at position ``n - 1`` sees keys ``n - W .. n - 1``;
  the K/V loop *starts* at the window's first position, so a decode reads W keys whatever the
  context and never loads a block-table entry before the window (a strategy that frees the
  blocks behind a window leaves those entries stale). Split-K splits the window's span only.
- ``SOFTCAP`` (cap ``c``): scaled scores become ``c * tanh(s / c)`` before masking.
- ``SINKS`` (``[Hq]`` logits): join the softmax denominator once, after the K/V loop (with
  split-K, in the merge), and add nothing to the output.

Importing this module imports triton (``ImportError`` when it is missing).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
# float32 operands on a GPU: three TF32 tensor-core products (about float32 accuracy) instead of
# IEEE FMAs, which bypass the tensor cores and spill at large head dims.
FP32_DOT_PRECISION = tl.constexpr("tf32x3")
FP8_UNSCALE = tl.constexpr(256.0)  # undoes e4m3_bits_to_fp16's 2^-8 (exact: a power of two)
# Under TRITON_INTERPRET=1 the K/V loops are `while` loops: Triton 3.6's interpreter converts a
# loop bound with int() of a one-element array, which NumPy >= 2.4 refuses, but tests the
# truth of one (`bool`) fine. Compiled kernels keep `range` (only `for` loops are pipelined).
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


@triton.jit
def token_slots(table_row_ptr, pos, mask, BLOCK_SIZE: tl.constexpr, PAGED: tl.constexpr,
                RING: tl.constexpr):
    """Cache slots (int64) of positions ``pos`` of one sequence.

    ``table_row_ptr`` points at the sequence's block-table row (``PAGED``) or at its start slot;
    ``RING`` (contiguous): at its (start slot, ring length) pair, position p living at
    ``start + p % ring`` (a sliding-window group's ring, `contiguous` on a windowed model).
    """
    if PAGED:
        block = tl.load(table_row_ptr + pos // BLOCK_SIZE, mask=mask, other=0)
        return block.to(tl.int64) * BLOCK_SIZE + (pos % BLOCK_SIZE)
    elif RING:
        start = tl.load(table_row_ptr).to(tl.int64)
        ring = tl.load(table_row_ptr + 1).to(tl.int64)
        return start + pos % ring
    else:
        start = tl.load(table_row_ptr).to(tl.int64)
        return start + pos


@triton.jit
def cast_rne(x, dtype: tl.constexpr):
    """float32 ``x`` rounded to nearest-even in ``dtype``.

    For bfloat16 the rounding is done on the float32 bits first (the result converts exactly):
    the CPU interpreter's float32 -> bfloat16 cast truncates, the GPU's rounds; this way both
    agree with ``torch.Tensor.to``. NaN stays NaN (tests/kernels/test_bit_arithmetic.py
    mirrors these integer steps in torch).
    """
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        # NaN must stay NaN: CUDA's canonical NaN 0x7FFFFFFF would carry into the sign bit
        # (0x80000000, -0.0). Keeping the top half with the quiet bit set is a NaN in bf16.
        bits = tl.where(x != x, (bits | 0x00400000) & 0xFFFF0000, rounded)
        return bits.to(tl.float32, bitcast=True).to(dtype)
    else:
        return x.to(dtype)


@triton.jit
def e4m3_bits_to_fp16(code):
    """float8_e4m3fn bit patterns (``code``: uint8) as float16 values ``2^-8`` times too small.

    fp8 caches are read through a ``uint8`` view: Triton's native e4m3 type (fp8e4nv) exists
    only from sm_89, so this keeps A100 (sm_80) working and gives the same values everywhere.
    Moving sign, exponent and mantissa into float16's fields as they are is exact, subnormals
    included (float16's exponent bias is 8 more than e4m3's); callers fold the ``2^8`` into
    the K/V scales (``FP8_UNSCALE``). Two integer ops per value, in 16-bit registers.
    """
    c = code.to(tl.uint16)
    bits = ((c & 0x80) << 8) | ((c & 0x7F) << 7)
    x = bits.to(tl.float16, bitcast=True)
    return tl.where((c & 0x7F) == 0x7F, float("nan"), x)


@triton.jit
def load_kv_tile(cache_ptr, slots, stride_slot, head_off, offs_d, mask_2d,
                 DOT_FP32: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, FP8: tl.constexpr):
    """A ``[tokens, head_dim]`` tile of one KV head in the dtype fed to ``tl.dot``.

    ``FP8``: the cache pointer is a ``uint8`` view of an e4m3 cache; the tile is ``2^-8`` times
    the stored values (see ``e4m3_bits_to_fp16``).
    """
    ptrs = cache_ptr + slots[:, None] * stride_slot + head_off + offs_d[None, :]
    if FP8:
        x = e4m3_bits_to_fp16(tl.load(ptrs, mask=mask_2d, other=0))
    else:
        x = tl.load(ptrs, mask=mask_2d, other=0.0)
    if DOT_FP32:
        return x.to(tl.float32)
    else:
        return x.to(COMPUTE_DTYPE)


@triton.jit
def sequence_row(table_ptr, seq, stride_table, PAGED: tl.constexpr, RING: tl.constexpr):
    """What ``token_slots`` reads for sequence ``seq``: its block-table row, its (start slot,
    ring length) row (``RING``) or its start slot."""
    if PAGED or RING:
        return table_ptr + seq.to(tl.int64) * stride_table
    else:
        return table_ptr + seq


@triton.jit
def kv_head_scale(scale_ptr, kv_head, PER_HEAD_SCALE: tl.constexpr):
    """An fp8 cache's scale for KV head ``kv_head`` (its own, or the tensor's single one),
    times ``FP8_UNSCALE`` for the tiles ``load_kv_tile`` decodes."""
    if PER_HEAD_SCALE:
        return tl.load(scale_ptr + kv_head) * FP8_UNSCALE
    else:
        return tl.load(scale_ptr) * FP8_UNSCALE


@triton.jit
def tile_scores(q, k, DOT_FP32: tl.constexpr):
    """``q @ k.T`` of a query tile and a key tile (float32-accurate when ``DOT_FP32``)."""
    if DOT_FP32:
        return tl.dot(q, tl.trans(k), input_precision=FP32_DOT_PRECISION)
    else:
        return tl.dot(q, tl.trans(k))


@triton.jit
def chunk_scores(q_rows, q_mask, k_cache_ptr, slots, stride_k_slot, k_head_off, tok_mask, d0,
                 HEAD_DIM: tl.constexpr, BLOCK_DK: tl.constexpr, DOT_FP32: tl.constexpr,
                 FP8: tl.constexpr):
    """``q @ k.T`` over head-dim columns ``[d0, d0 + BLOCK_DK)``: the queries' (``q_rows``,
    row pointers; ``q_mask``, real rows) and the keys' at ``slots``."""
    offs_d = d0 + tl.arange(0, BLOCK_DK)
    d_mask = offs_d < HEAD_DIM
    q = tl.load(q_rows + offs_d[None, :], mask=q_mask[:, None] & d_mask[None, :], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    k = load_kv_tile(k_cache_ptr, slots, stride_k_slot, k_head_off, offs_d,
                     tok_mask[:, None] & d_mask[None, :], DOT_FP32, q.dtype, FP8)
    return tile_scores(q, k, DOT_FP32)


@triton.jit
def qk_scores(q_rows, q_mask, k_cache_ptr, slots, stride_k_slot, k_head_off, tok_mask,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
              DOT_FP32: tl.constexpr, FP8: tl.constexpr):
    """Raw ``q @ k.T`` of the query rows and one key tile, summed over head-dim chunks of
    ``BLOCK_DK`` columns (``BLOCK_D``: one chunk).

    The query chunks are loaded per key tile rather than held across the K/V loop: a whole
    float32 row of 256 is 128 registers per thread as a ``tl.dot`` operand, twice that split
    for 3xTF32, more than a thread has (`launch_config` chunks those rows).
    """
    s = chunk_scores(q_rows, q_mask, k_cache_ptr, slots, stride_k_slot, k_head_off, tok_mask,
                     0, HEAD_DIM, BLOCK_DK, DOT_FP32, FP8)
    for d0 in tl.static_range(BLOCK_DK, BLOCK_D, BLOCK_DK):
        s += chunk_scores(q_rows, q_mask, k_cache_ptr, slots, stride_k_slot, k_head_off,
                          tok_mask, d0, HEAD_DIM, BLOCK_DK, DOT_FP32, FP8)
    return s


@triton.jit
def scaled_scores(s, qk_scale, softcap_arg, SOFTCAP: tl.constexpr):
    """Raw ``q @ k.T`` scores ``s`` scaled, in log2 units (the softmax is base 2).

    Plain: ``s * qk_scale``. ``SOFTCAP``: ``c * tanh(x)`` with ``x = s * scale / c``, computed
    as ``c * (1 - 2 / (e^(2x) + 1))`` (exact at both saturations); the caller passes
    ``qk_scale = 2 * scale * log2(e) / c`` (so ``e^(2x)`` is one ``exp2``) and
    ``softcap_arg = c * log2(e)``.
    """
    if SOFTCAP:
        return softcap_arg * (1.0 - 2.0 / (tl.exp2(s * qk_scale) + 1.0))
    else:
        return s * qk_scale


@triton.jit
def fold_sinks(sinks_ptr, heads, mask, m_i, l_i, acc):
    """Add each row's sink logit (natural units, ``sinks_ptr[heads]``) to the denominator."""
    sink = tl.load(sinks_ptr + heads, mask=mask, other=float("-inf")).to(tl.float32) * LOG2E
    m_new = tl.maximum(m_i, sink)
    m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.exp2(sink - m_safe)
    return m_new, l_i, acc * alpha[:, None]


@triton.jit
def online_softmax_update(s, v, m_i, l_i, acc, DOT_FP32: tl.constexpr,
                          MAY_BE_EMPTY: tl.constexpr):
    """Fold one key tile into flash attention's running max, denominator and accumulator.

    ``s``: the tile's scores in log2 units, masked to -inf; unless ``MAY_BE_EMPTY`` every row
    must have a finite running max afterwards (``MAY_BE_EMPTY`` guards rows that saw no key
    yet, as a window's rows can). ``v``: the tile's values in the dtype fed to ``tl.dot``.
    Returns ``(m_i, l_i, acc)``.
    """
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    if MAY_BE_EMPTY:
        m_use = tl.where(m_new > float("-inf"), m_new, 0.0)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if DOT_FP32:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=FP32_DOT_PRECISION)
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def score_scales(softmax_scale, softcap, k_scale_ptr, kv_head, FP8: tl.constexpr,
                 PER_HEAD_SCALE: tl.constexpr, SOFTCAP: tl.constexpr):
    """``(qk_scale, softcap_arg)`` for `scaled_scores`, the fp8 K scale folded in."""
    qk_scale = softmax_scale * LOG2E
    if FP8:
        qk_scale = qk_scale * kv_head_scale(k_scale_ptr, kv_head, PER_HEAD_SCALE)
    if SOFTCAP:
        return 2.0 * qk_scale / softcap, softcap * LOG2E
    else:
        return qk_scale, softcap


@triton.jit
def attend_tile(n0, kv_end, q_rows, q_mask, q_pos, qk_scale, table_row, k_cache_ptr,
                v_cache_ptr, stride_k_slot, stride_v_slot, k_head_off, v_head_off, offs_d,
                d_mask, m_i, l_i, acc, window, softcap_arg, HEAD_DIM: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_SIZE: tl.constexpr, PAGED: tl.constexpr, FP8: tl.constexpr,
                DOT_FP32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                SOFTCAP: tl.constexpr, RING: tl.constexpr):
    """Fold the keys of positions ``[n0, min(n0 + BLOCK_N, kv_end))`` into ``(m_i, l_i, acc)``;
    ``CAUSAL`` (prefill) masks them for the rows at ``q_pos``, ``WINDOW`` to each row's window.
    A decode's query sees every key its loop reads (the loop starts at its window): neither."""
    pos = n0 + tl.arange(0, BLOCK_N)
    tok_mask = pos < kv_end
    slots = token_slots(table_row, pos, tok_mask, BLOCK_SIZE, PAGED, RING)
    raw = qk_scores(q_rows, q_mask, k_cache_ptr, slots, stride_k_slot, k_head_off, tok_mask,
                    HEAD_DIM, BLOCK_D, BLOCK_DK, DOT_FP32, FP8)
    s = scaled_scores(raw, qk_scale, softcap_arg, SOFTCAP)
    allowed = tok_mask[None, :]
    if CAUSAL:
        allowed = allowed & (pos[None, :] <= q_pos[:, None])
    if WINDOW:
        allowed = allowed & (pos[None, :] > q_pos[:, None] - window)
    s = tl.where(allowed, s, float("-inf"))
    # Every decode tile holds a real token, and without a window position 0 is in a prefill's
    # first tile, visible to every row: the running max stays finite.
    v = load_kv_tile(v_cache_ptr, slots, stride_v_slot, v_head_off, offs_d,
                     tok_mask[:, None] & d_mask[None, :], DOT_FP32,
                     q_rows.dtype.element_ty, FP8)
    return online_softmax_update(s, v, m_i, l_i, acc, DOT_FP32, WINDOW)


@triton.jit
def window_span(seq_len, window, WINDOW: tl.constexpr):
    """The first key position a sequence's newest query sees."""
    if WINDOW:
        return tl.maximum(seq_len - window, 0)
    else:
        return 0


# Arguments that change from step to step (block-table width, split count) are not specialized:
# otherwise every new value (or its divisibility by 16) compiles a new variant mid-run. Nor is
# the alignment of the block table and lengths: executors pass slices such as
# ``seq_lens[num_prefill:]`` whose start moves by 4 bytes per prefill sequence. A window length
# differs between models and layers, and a model's sinks may be a slice of a larger tensor
# (one tensor-parallel rank's heads): not specialized either.
@triton.jit(do_not_specialize=["num_splits", "stride_table", "window"],
            do_not_specialize_on_alignment=["table_ptr", "seq_lens_ptr", "sinks_ptr"])
def _decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr,
    table_ptr, seq_lens_ptr,
    out_ptr, m_ptr, l_ptr, sinks_ptr,
    softmax_scale, num_splits, window, softcap,
    stride_q_seq, stride_q_head,
    stride_k_slot, stride_k_head, stride_v_slot, stride_v_head,
    stride_table,
    stride_o_seq, stride_o_head, stride_o_split,
    stride_ml_seq, stride_ml_head,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    PAGED: tl.constexpr, SPLIT: tl.constexpr,
    FP8: tl.constexpr, PER_HEAD_SCALE: tl.constexpr, DOT_FP32: tl.constexpr,
    WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, SINKS: tl.constexpr,
    RING: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    first = window_span(seq_len, window, WINDOW)
    if SPLIT:
        chunk = tl.cdiv(tl.cdiv(seq_len - first, num_splits), BLOCK_N) * BLOCK_N
        start = first + split * chunk
        end = tl.minimum(seq_len, start + chunk)
    else:
        start = first
        end = seq_len

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * GROUP + offs_g

    q_rows = q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head

    qk_scale, softcap_arg = score_scales(softmax_scale, softcap, k_scale_ptr, kv_head,
                                         FP8, PER_HEAD_SCALE, SOFTCAP)
    table_row = sequence_row(table_ptr, seq, stride_table, PAGED, RING)
    k_head_off = kv_head * stride_k_head
    v_head_off = kv_head * stride_v_head

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)

    if INTERPRETED:
        n0 = start
        while n0 < end:
            m_i, l_i, acc = attend_tile(
                n0, end, q_rows, g_mask, 0, qk_scale, table_row, k_cache_ptr, v_cache_ptr,
                stride_k_slot, stride_v_slot, k_head_off, v_head_off, offs_d, d_mask, m_i, l_i,
                acc, window, softcap_arg, HEAD_DIM, BLOCK_D, BLOCK_DK, BLOCK_N, BLOCK_SIZE,
                PAGED, FP8, DOT_FP32, False, False, SOFTCAP, RING)
            n0 += BLOCK_N
    else:
        for n0 in range(start, end, BLOCK_N):
            m_i, l_i, acc = attend_tile(
                n0, end, q_rows, g_mask, 0, qk_scale, table_row, k_cache_ptr, v_cache_ptr,
                stride_k_slot, stride_v_slot, k_head_off, v_head_off, offs_d, d_mask, m_i, l_i,
                acc, window, softcap_arg, HEAD_DIM, BLOCK_D, BLOCK_DK, BLOCK_N, BLOCK_SIZE,
                PAGED, FP8, DOT_FP32, False, False, SOFTCAP, RING)

    if FP8:
        acc = acc * kv_head_scale(v_scale_ptr, kv_head, PER_HEAD_SCALE)

    out_mask = g_mask[:, None] & d_mask[None, :]
    if SPLIT:
        # The sinks join once, in the merge.
        o_ptrs = (out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head
                  + split * stride_o_split + offs_d[None, :])
        tl.store(o_ptrs, acc, mask=out_mask)
        ml_off = seq * stride_ml_seq + heads * stride_ml_head + split
        tl.store(m_ptr + ml_off, m_i, mask=g_mask)
        tl.store(l_ptr + ml_off, l_i, mask=g_mask)
    else:
        if SINKS:
            m_i, l_i, acc = fold_sinks(sinks_ptr, heads, g_mask, m_i, l_i, acc)
        # An empty sequence (seq_len 0) yields zeros rather than 0/0.
        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        o_ptrs = out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head + offs_d[None, :]
        tl.store(o_ptrs, cast_rne(out, out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit(do_not_specialize=["num_splits"], do_not_specialize_on_alignment=["sinks_ptr"])
def _merge_splits_kernel(
    partial_ptr, m_ptr, l_ptr, out_ptr, sinks_ptr, num_splits,
    stride_p_seq, stride_p_head, stride_p_split,
    stride_ml_seq, stride_ml_head,
    stride_o_seq, stride_o_head,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SPLITS: tl.constexpr,
    SINKS: tl.constexpr,
):
    """Combine the per-split partial results of one (sequence, query head); ``SINKS``: the
    head's sink logit joins the denominator here, once."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < num_splits
    d_mask = offs_d < HEAD_DIM

    ml_off = seq * stride_ml_seq + head * stride_ml_head + offs_s
    m = tl.load(m_ptr + ml_off, mask=s_mask, other=float("-inf"))
    sums = tl.load(l_ptr + ml_off, mask=s_mask, other=0.0)
    m_max = tl.max(m, axis=0)
    if SINKS:
        sink = tl.load(sinks_ptr + head).to(tl.float32) * LOG2E
        m_max = tl.maximum(m_max, sink)
    # Empty splits have m = -inf; if every split is empty, the output is zero.
    m_safe = tl.where(m_max > float("-inf"), m_max, 0.0)
    w = tl.where(m > float("-inf"), tl.exp2(m - m_safe), 0.0)
    denom = tl.sum(w * sums, axis=0)
    if SINKS:
        denom += tl.exp2(sink - m_safe)

    p_ptrs = (partial_ptr + seq * stride_p_seq + head * stride_p_head
              + offs_s[:, None] * stride_p_split + offs_d[None, :])
    part = tl.load(p_ptrs, mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    num = tl.sum(part * w[:, None], axis=0)
    out = num / tl.where(denom > 0.0, denom, 1.0)
    tl.store(out_ptr + seq * stride_o_seq + head * stride_o_head + offs_d,
             cast_rne(out, out_ptr.dtype.element_ty), mask=d_mask)
