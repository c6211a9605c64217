"""PyTorch reference kernels: the CPU execution path and the ground truth for the Triton kernels.

Shapes (T: new tokens in the batch, S: sequences, Hq/Hkv: query/KV heads, D: head dim):

- `q`: `[T, Hq, D]` for varlen attention, `[S, Hq, D]` for decode;
- `k_cache`, `v_cache`: `[num_slots, Hkv, D]`, any float dtype or `float8_e4m3fn`; V may be
  narrower than K (`Dv`): a latent-attention cache passes `k_cache[..., :kv_lora_rank]` as
  its V, and outputs are then `[..., Hq, Dv]`;
- `query_start_loc`: `[S + 1]` int, sequence `i` owns `q[query_start_loc[i]:query_start_loc[i+1]]`,
  which are the *last* tokens of its `seq_lens[i]` tokens (cached prefix + new), causal;
- `block_tables`: `[S, max_blocks]` int (paged), `start_slots`: `[S]` int (contiguous).

Every attention function takes three keyword-only variants of the score (`AttentionVariant`):
`sliding_window` W (a query at position i sees keys i - W < j <= i, transformers' rule, and
only those keys' slots are read: a paged table's entries before the window may be stale),
`softcap` c (scores become c * tanh(score / c), Gemma 2), and `sinks` (`[Hq]` float logits,
one per query head, that join each softmax's denominator and add no value, gpt-oss).

All arithmetic is float32; outputs take `q`'s dtype.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value

Scale = float | torch.Tensor | None

# A decode bucket takes a shorter sequence while padding it at most doubles its keys, or adds
# at most this many positions: below that, the padded keys cost less than another bucket's
# fixed cost (gather + attention call) on a CPU.
DECODE_BUCKET_SLACK = 256

# A contiguous float32 decode attends each sequence where it lies in the arena (one attention
# call per sequence, nothing copied) once the K/V a batched call would gather for the whole
# batch reach this size (a copy that large no longer stays in the cache while attention
# reads it); below it one gather and one call for the bucket cost less. Measured on one CPU
# thread of a 32 MiB-L3 machine (tests/benchmarks/test_decode_vs_plain_forward.py): the
# gather wins up to 8 MiB (8-32 sequences x 512-1,024 positions of the 4-layer Llama),
# in place from 16 MiB (32 x 1,024, 64 x 512). A lone sequence is always attended in place.
IN_PLACE_MIN_BYTES = 12 * 2**20


# fp8 K and V gathers up to this many elements each are decoded in one pass (fewer operations
# a layer); above it, apart (measured on one CPU thread: no gain past ~128K elements).
FP8_PAIR_MAX_ELEMENTS = 1 << 17

# An fp8 decode gathers and dequantizes a bucket's K and V into float32 before attending; a
# bucket whose float K/V would pass this size is attended in row groups under it, so that each
# group's dequantized K/V are still in the last-level cache when attention reads them (one
# gather of a 64 x 1,024 batch of the 4-layer Llama is 32 MiB, the whole L3 of the machine
# `tests/benchmarks/test_decode_vs_plain_forward.py` was measured on).
FP8_GROUP_MAX_BYTES = 4 * 2**20


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == FP8_DTYPE


_constants: dict[tuple, torch.Tensor] = {}


def _const(value: float | int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`value` as a 0-d tensor, made once: an in-place operation with a Python number
    wraps it in a new tensor each call (~1.5 us on the CPU), as much as a small operation."""
    key = (value, dtype, device)
    found = _constants.get(key)
    if found is None:
        with torch.inference_mode(False):
            found = _constants[key] = torch.tensor(value, dtype=dtype, device=device)
    return found


def _scale_tensor(scale: Scale, device: torch.device) -> torch.Tensor:
    """A per-tensor scale as a 0-d tensor, a per-head scale `[Hkv]` as `[Hkv, 1]`."""
    if scale is None:
        return torch.ones((), dtype=torch.float32, device=device)
    if (isinstance(scale, torch.Tensor) and scale.dim() == 0 and scale.dtype == torch.float32
            and scale.device == device):  # an arena's own scale, as it is (each write's case)
        return scale
    t = torch.as_tensor(scale, dtype=torch.float32, device=device)
    return t.reshape(-1, 1) if t.dim() == 1 else t


def quantize_fp8(x: torch.Tensor, scale: Scale, out: torch.Tensor | None = None) -> torch.Tensor:
    """`x / scale` saturated to the e4m3 range, as `float8_e4m3fn` (into `out` if given).
    `x`: `[..., Hkv, D]`."""
    s = _scale_tensor(scale, x.device)
    x = x if x.dtype == torch.float32 else x.float()  # a no-op `float` still costs a dispatch
    # Number bounds: clamp's tensor-bounds kernel is several times slower past a few rows.
    scaled = torch.div(x, s).clamp_(-FP8_MAX, FP8_MAX)
    return scaled.to(FP8_DTYPE) if out is None else out.copy_(scaled)


def _fp8_to_float(values: torch.Tensor, scale: Scale, out: torch.Tensor,
                  apply_scale: bool = True) -> torch.Tensor:
    """fp8 `values` times `scale` into float32 `out` (same shape), bit for bit
    `values.float() * scale`, in five vectorised passes; without `apply_scale`, four, leaving
    `values.float() / 256` for the caller to scale (`_fp8_fold`).

    PyTorch converts float8 to float32 one element at a time on the CPU (~4 ns an element);
    e4m3's bits moved into a float16 instead (sign to bit 15, exponent and mantissa to bits
    13..7) are the same value times 2^-8, subnormals included, so the 2^8 joins the scale.
    The one difference: e4m3's NaN (never written: `quantize_fp8` saturates) reads as 480.
    """
    bits = _scratch_buffer("fp8_bits", tuple(values.shape), torch.int16, values.device)
    bits.copy_(values.view(torch.int8))  # sign-extended: bits 15..7 all carry the sign
    bits.mul_(_const(128, torch.int16, values.device))  # << 7, in a faster int16 kernel
    # float16's top exponent bit: always 0 for an e4m3 value
    bits.bitwise_and_(_const(~0x4000, torch.int16, values.device))
    out.copy_(bits.view(torch.float16))
    if not apply_scale:
        return out
    return out.mul_(_scale_tensor(scale, values.device) * 256.0)


def _fp8_fold(cache: torch.Tensor, scale: Scale,
              as_tensor: bool = False) -> torch.Tensor | float | None:
    """What a decode over `_gather_float(..., fold=True)` values still owes each KV head:
    `256 * scale`, a number (one scale, on the CPU) or `[Hkv, 1, 1]` (to broadcast over
    `[S, Hkv, group, D]`); None for an unquantized cache. Applied to the attention's scale
    (a number for K) or the query (per head) and to the output (V), instead of to every
    gathered key and value.

    A float32 scale times 256 is exact. K's number joins the attention's scale, an
    operation fewer a layer (the scores round once, not after q's multiply too: the last bit
    of an output may differ from a per-head fold of the same values). With `as_tensor` (V's,
    which multiplies the output in place) a one-scale fold on the cache's device is a 0-d
    tensor: in place, a number costs its wrapping in a tensor each call."""
    if not is_fp8(cache):
        return None
    if (as_tensor and isinstance(scale, torch.Tensor) and scale.dim() == 0
            and scale.dtype == torch.float32 and scale.device == cache.device):
        return torch.mul(scale, _const(256.0, torch.float32, scale.device))
    if scale is None or isinstance(scale, (int, float)):
        return float(_scale_tensor(scale, torch.device("cpu"))) * 256.0
    if scale.dim() == 0 and scale.device.type == "cpu":
        return (scale.item() if scale.dtype == torch.float32 else float(scale.float())) * 256.0
    fold = _scale_tensor(scale, cache.device) * 256.0
    return fold.reshape(-1, 1, 1) if fold.dim() else fold


def dequantize(cache_values: torch.Tensor, scale: Scale) -> torch.Tensor:
    """Cache contents `[..., Hkv, D]` as float32 (multiplying fp8 values by their scale)."""
    if is_fp8(cache_values):
        out = torch.empty(cache_values.shape, dtype=torch.float32, device=cache_values.device)
        return _fp8_to_float(cache_values, scale, out)
    return cache_values.float()


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: Scale = None,
    v_scale: Scale = None,
) -> None:
    """Scatter new tokens' K/V `[T, Hkv, D]` into their slots ("reshape and cache")."""
    slots = (slot_mapping.long(),)  # index_put_ itself: indexing syntax costs a parse a call
    if is_fp8(k_cache):  # through reused buffers: a fresh fp8 tensor costs more than its copy
        k_cache.index_put_(slots, quantize_fp8(
            k, k_scale, _scratch_buffer("write_k", tuple(k.shape), FP8_DTYPE, k.device)))
        v_cache.index_put_(slots, quantize_fp8(
            v, v_scale, _scratch_buffer("write_v", tuple(v.shape), FP8_DTYPE, v.device)))
    else:
        # `to` only where it converts: a no-op one still costs a dispatch, twice a layer
        k_cache.index_put_(slots, k if k.dtype == k_cache.dtype else k.to(k_cache.dtype))
        v_cache.index_put_(slots, v if v.dtype == v_cache.dtype else v.to(v_cache.dtype))


def write_latent(
    row: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, scale: Scale = None
) -> None:
    """Scatter new tokens' latent-attention rows `[T, 1, latent + rope]` into their slots: one
    tensor, since the value is a view of it."""
    slots = slot_mapping.long()
    cache[slots] = quantize_fp8(row, scale) if is_fp8(cache) else row.to(cache.dtype)


def paged_slots(block_table: torch.Tensor, seq_len: int, block_size: int,
                first: int = 0) -> torch.Tensor:
    """Slots of positions `first..seq_len-1` of one sequence through its block table."""
    pos = torch.arange(first, seq_len, device=block_table.device)
    return block_table.long()[pos // block_size] * block_size + pos % block_size


def contiguous_slots(start_slot: int, seq_len: int, device: torch.device,
                     first: int = 0, ring_len: int = 0) -> torch.Tensor:
    """Slots of positions `first..seq_len-1` of one sequence from `start_slot`; with a
    `ring_len` (0: none) position p lives at `start_slot + p % ring_len`."""
    if not ring_len:
        return torch.arange(start_slot + first, start_slot + seq_len, device=device)
    return start_slot + torch.arange(first, seq_len, device=device) % ring_len


def first_visible(seq_len: int, num_queries: int, sliding_window: int | None) -> int:
    """The first key position any of a sequence's last `num_queries` queries sees."""
    if sliding_window is None:
        return 0
    return max(0, seq_len - num_queries - sliding_window + 1)


def _scores_softmax(scores: torch.Tensor, visible: torch.Tensor | None, softcap: float | None,
                    sinks: torch.Tensor | None) -> torch.Tensor:
    """Probabilities from scaled scores `[..., L]`; `sinks` (broadcastable to `[..., 1]`)
    join each denominator."""
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.float().expand(*scores.shape[:-1], 1)
    probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)
    return probs[..., :-1]


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
    first_key: int = 0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of the last `n` positions (q `[n, Hq, D]`) over `k`, `v` `[L, Hkv, D]`,
    the keys of positions `first_key .. first_key + L - 1`."""
    n = q.shape[0]
    seq_len = first_key + k.shape[0]
    # [1, H, n, D] with enable_gqa: query head h reads KV head h // group without repeated K/V.
    # Heads as SDPA's head dimension (not broadcast batch dims) keep PyTorch on its fused CPU
    # kernel; a broadcast K/V batch falls back to the math path, ~10x slower on a long prompt.
    qf = q.float().transpose(0, 1)[None]
    kf = k.transpose(0, 1)[None]
    vf = v.transpose(0, 1)[None]
    plain = softcap is None and sinks is None
    if plain and n == seq_len and sliding_window is None:
        out = F.scaled_dot_product_attention(
            qf, kf, vf, is_causal=True, scale=softmax_scale, enable_gqa=True
        )
        return out[0].transpose(0, 1)
    # Query i sits at position seq_len - n + i (causal, bottom-right).
    query_pos = torch.arange(seq_len - n, seq_len, device=q.device)
    key_pos = torch.arange(first_key, seq_len, device=q.device)
    visible = key_pos[None, :] <= query_pos[:, None]
    if sliding_window is not None:
        visible &= key_pos[None, :] > query_pos[:, None] - sliding_window
    if plain:
        out = F.scaled_dot_product_attention(
            qf, kf, vf, attn_mask=visible, scale=softmax_scale, enable_gqa=True
        )
        return out[0].transpose(0, 1)
    group = q.shape[1] // k.shape[1]
    kf = kf.repeat_interleave(group, dim=1)
    vf = vf.repeat_interleave(group, dim=1)
    head_sinks = None if sinks is None else sinks.reshape(1, -1, 1, 1)
    probs = _scores_softmax(qf @ kf.transpose(-1, -2) * softmax_scale, visible, softcap,
                            head_sinks)
    return (probs @ vf)[0].transpose(0, 1)


def _varlen_attention(q, k_cache, v_cache, query_start_loc, seq_lens, slots_of, softmax_scale,
                      k_scale, v_scale, sliding_window=None, softcap=None,
                      sinks=None) -> torch.Tensor:
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()

    def attend(i: int) -> torch.Tensor:
        lo, hi = starts[i], starts[i + 1]
        first = first_visible(lens[i], hi - lo, sliding_window)
        slots = slots_of(i, lens[i], first)
        k = _gather_float(k_cache, slots, k_scale, "k")
        v = _gather_float(v_cache, slots, v_scale, "v")
        return _attend(q[lo:hi], k, v, softmax_scale, first, sliding_window, softcap,
                       sinks).to(q.dtype)

    if len(lens) == 1 and starts[1] - starts[0] == q.shape[0] > 0:
        return attend(0)  # one sequence's queries are the whole output: no copy into one
    out = torch.empty((*q.shape[:-1], v_cache.shape[-1]), dtype=q.dtype, device=q.device)
    for i in range(len(lens)):
        if starts[i + 1] > starts[i]:
            out[starts[i] : starts[i + 1]] = attend(i)
    return out


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
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Varlen causal attention (prefill, chunked prefill, prefix hits) through block tables."""
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n, first: paged_slots(block_tables[i], n, block_size, first),
        softmax_scale, k_scale, v_scale, sliding_window, softcap, sinks,
    )


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
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    ring_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Varlen causal attention reading each sequence from `[start_slot, start_slot + len)`;
    with `ring_lens` (`[S]` int, a window group's rings) position p of sequence i from
    `start_slots[i] + p % ring_lens[i]`."""
    starts = start_slots.tolist()
    rings = [0] * len(starts) if ring_lens is None else ring_lens.tolist()
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n, first: contiguous_slots(starts[i], n, q.device, first, rings[i]),
        softmax_scale, k_scale, v_scale, sliding_window, softcap, sinks,
    )


def _decode_plan(lens: list[int], firsts: list[int]) -> list[list[int]] | None:
    """Decode buckets of similar length (row lists), so padding at most doubles the keys read
    (or adds at most `DECODE_BUCKET_SLACK` positions); None when one bucket holds every row.

    One padded batch would cost batch x longest context; with ragged (chat-like) lengths the
    buckets cost about the sum of the contexts, which is what the attention itself needs.
    """
    spans = [n - f for n, f in zip(lens, firsts, strict=True)]
    longest, shortest = max(spans), min(spans)
    if 2 * shortest >= longest or longest - shortest <= DECODE_BUCKET_SLACK:
        return None
    order = sorted(range(len(spans)), key=lambda i: -spans[i])
    buckets, start = [], 0
    while start < len(order):
        longest = spans[order[start]]
        end = start + 1
        while end < len(order) and (
            2 * spans[order[end]] >= longest or longest - spans[order[end]] <= DECODE_BUCKET_SLACK
        ):
            end += 1
        buckets.append(order[start:end])
        start = end
    return buckets


def _longest_span(rows, lens: list[int], firsts: list[int]) -> int:
    """The most keys any of `rows` reads (at least 1): what its bucket gathers per row."""
    return max(max(lens[i] - firsts[i] for i in rows), 1)


def _group_plan(plan: list[list[int]] | None, lens: list[int], firsts: list[int],
                key_bytes: int) -> tuple[list[list[int]] | None, list[int] | None]:
    """`plan` (None: one bucket of every row) with each bucket cut, in its own row order, into
    groups whose gathered keys (`key_bytes` each, at the bucket's longest span) stay within
    `FP8_GROUP_MAX_BYTES`, and the span each group gathers: its bucket's, so that every row
    reads the keys and padding it would in the bucket (the same outputs to the bit). (None,
    None) when no bucket needs cutting and there was one."""
    buckets = [list(range(len(lens)))] if plan is None else plan
    grouped: list[list[int]] = []
    spans: list[int] = []
    for rows in buckets:
        span = _longest_span(rows, lens, firsts)
        size = max(1, FP8_GROUP_MAX_BYTES // (span * key_bytes))
        for i in range(0, len(rows), size):
            grouped.append(rows[i : i + size])
            spans.append(span)
    if plan is None and len(grouped) == 1:
        return None, None
    return grouped, spans


# Per-thread buffers a decode gathers K/V into, reused across layers and steps: a fresh
# multi-megabyte tensor per gather costs the CPU its page faults, about as much as the copy.
_scratch = threading.local()


def _scratch_buffer(role: str, shape: tuple[int, ...], dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """A reused tensor of `shape` (its contents are whatever the last user left)."""
    pool = _scratch.__dict__.setdefault("pool", {})
    key = (role, dtype, device)
    found = pool.get(key)
    if found is not None:
        view = found[1].get(shape)
        if view is not None:  # a step's layers ask for the same shapes: one view each
            return view
    numel = math.prod(shape)
    if found is None or found[0].numel() < numel:
        # A normal tensor, so that callers outside inference mode can write into it too.
        with torch.inference_mode(False):
            found = pool[key] = (torch.empty(numel, dtype=dtype, device=device), {})
    if len(found[1]) >= 64:  # shapes change with the batch and the context
        found[1].clear()
    view = found[1][shape] = found[0][:numel].view(shape)
    return view


def _gather_float(rows_of: torch.Tensor, index: torch.Tensor, scale: Scale,
                  role: str, fold: bool = False) -> torch.Tensor:
    """`rows_of.index_select(0, index)` as float32 (fp8 dequantized) in a reused buffer.

    fp8 rows are gathered as bytes (a quarter of the traffic) and dequantized once; with
    `fold`, their scale is left to the caller (`_fp8_fold`)."""
    shape = (index.numel(), *rows_of.shape[1:])
    out = _scratch_buffer(role, shape, torch.float32, rows_of.device)
    if rows_of.dtype == torch.float32:
        return torch.index_select(rows_of, 0, index, out=out)
    raw = _scratch_buffer("raw", shape, rows_of.dtype, rows_of.device)
    torch.index_select(rows_of, 0, index, out=raw)
    if is_fp8(raw):
        return _fp8_to_float(raw, scale, out, apply_scale=not fold)
    return out.copy_(raw)


def _gather_kv_float(k_rows: torch.Tensor, v_rows: torch.Tensor, index: torch.Tensor,
                     k_scale: Scale, v_scale: Scale) -> tuple[torch.Tensor, torch.Tensor]:
    """`_gather_float(..., fold=True)` of K and of V at the same `index`. fp8 K and V of one
    shape are gathered side by side and decoded in one pass: a small decode's cost is its
    count of operations, not their size (above `FP8_PAIR_MAX_ELEMENTS`, where their size
    is, the two are decoded apart)."""
    if not (is_fp8(k_rows) and is_fp8(v_rows) and k_rows.shape == v_rows.shape
            and index.numel() * math.prod(k_rows.shape[1:]) <= FP8_PAIR_MAX_ELEMENTS):
        return (_gather_float(k_rows, index, k_scale, "k", fold=True),
                _gather_float(v_rows, index, v_scale, "v", fold=True))
    shape = (2, index.numel(), *k_rows.shape[1:])
    raw = _scratch_buffer("raw_kv", shape, k_rows.dtype, k_rows.device)
    raw_k, raw_v = raw.unbind()
    torch.index_select(k_rows, 0, index, out=raw_k)
    torch.index_select(v_rows, 0, index, out=raw_v)
    out = _fp8_to_float(raw, None, _scratch_buffer("kv", shape, torch.float32, k_rows.device),
                        apply_scale=False)
    return out.unbind()


def _decode(q, k, v, valid, softmax_scale, softcap, sinks, k_fold=None, v_fold=None):
    """One query per sequence (`q` `[S, Hq, D]`) over gathered float32 `k`, `v`
    `[S, W, Hkv, D]`; `valid` (`[S, W]` bool, None: every key) masks padding and keys outside
    the window; `k_fold`, `v_fold` (`_fp8_fold`) scale the keys and values.

    Each KV head's group of query heads is the query "length" of one scaled-dot-product
    attention over that head's keys, so GQA needs no repeated K/V.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    group = num_q_heads // num_kv_heads
    kf = k.transpose(1, 2)  # [S, Hkv, W, D]
    vf = v.transpose(1, 2)
    qf = q if q.dtype == torch.float32 else q.float()
    qf = qf.reshape(num_seqs, num_kv_heads, group, head_dim)
    if isinstance(k_fold, float):  # q . (k f) s = (q . k) (f s): one operation fewer a layer
        softmax_scale = softmax_scale * k_fold
    elif k_fold is not None:  # per KV head: q . (k f) = (q f) . k
        qf = qf * k_fold
    mask = None if valid is None else valid[:, None, None, :]
    if softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=softmax_scale)
    else:
        head_sinks = None if sinks is None else sinks.reshape(1, num_kv_heads, group, 1)
        scores = qf @ kf.transpose(-1, -2) * softmax_scale  # [S, Hkv, group, W]
        probs = _scores_softmax(scores, mask, softcap, head_sinks)
        out = probs @ vf
    if v_fold is not None:  # sum p (v f) = (sum p v) f; `out` is this call's own tensor
        # (not in place where autograd records: SDPA keeps its output for the backward)
        out = out * v_fold if out.requires_grad else out.mul_(v_fold)
    out = out.reshape(num_seqs, num_q_heads, vf.shape[-1])
    return out if out.dtype == q.dtype else out.to(q.dtype)


# gather(rows, first, span) -> (k, v, key_pos): float32 K/V `[R, W, Hkv, D]` of sequences
# `rows` (`[R]` long, None: all, in order) from about position `first[r]` (`[R]` long; None
# without a window: 0) on, at least `span` positions each, with the position of each gathered
# key (`[W]` shared by every row, or `[R, W]`); keys outside a row's `[first, seq_len)` are
# masked, so a gather may read whole blocks around them.
Gather = Callable[[torch.Tensor | None, torch.Tensor | None, int],
                  tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _bucketed_decode(q, seq_lens, gather: Gather, softmax_scale, sliding_window=None,
                     softcap=None, sinks=None, v_head_dim=None, k_fold=None, v_fold=None,
                     memo: dict | None = None, group_key_bytes: int | None = None):
    """Decode in buckets of similar length (`_decode_plan`); a window caps each sequence's keys
    at W, so the cost grows with W, not with the context. `memo` (one dict per step and
    table, `shared_decode_indices`) keeps the plan, the buckets' indices and masks for the step's next
    layers. With `group_key_bytes` (what one gathered key costs in float32, K and V), buckets
    are split into row groups of at most `FP8_GROUP_MAX_BYTES` (`_group_plan`)."""
    out_shape = q.shape if v_head_dim is None else (*q.shape[:-1], v_head_dim)
    if q.shape[0] == 0:
        return torch.empty(out_shape, dtype=q.dtype, device=q.device)
    memo = {} if memo is None else memo
    if "plan" not in memo:
        lens = seq_lens.tolist()
        firsts = [first_visible(n, 1, sliding_window) for n in lens]
        plan, spans = _decode_plan(lens, firsts), None
        if group_key_bytes is not None:
            plan, spans = _group_plan(plan, lens, firsts, group_key_bytes)
        memo["plan"] = lens, firsts, plan, spans
    lens, firsts, plan, spans = memo["plan"]

    def bucket(rows: list[int] | None, span: int | None = None) -> torch.Tensor:
        key = None if rows is None else tuple(rows)
        if ("bucket", key) not in memo:
            chosen = range(len(lens)) if rows is None else rows
            bucket_lens = [lens[i] for i in chosen]
            bucket_firsts = [firsts[i] for i in chosen]
            if span is None:
                span = _longest_span(chosen, lens, firsts)
            index = None if rows is None else torch.tensor(rows, device=q.device)
            first = (None if sliding_window is None
                     else torch.tensor(bucket_firsts, device=q.device))
            masked = any(f != 0 for f in bucket_firsts) or min(bucket_lens) != span
            memo["bucket", key] = index, first, span, masked
        index, first, span, masked = memo["bucket", key]
        k, v, key_pos = gather(index, first, span)
        if ("valid", key) not in memo:
            valid = None
            if k.shape[1] != span or masked:
                row_lens = seq_lens.long() if index is None else seq_lens.long()[index]
                valid = key_pos < row_lens[:, None]
                if first is not None:
                    valid &= key_pos >= first[:, None]
            memo["valid", key] = valid
        return _decode(q if index is None else q[index], k, v, memo["valid", key],
                       softmax_scale, softcap, sinks, k_fold, v_fold)

    if plan is None:
        return bucket(None)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    for g, rows in enumerate(plan):
        out[torch.tensor(rows, device=q.device)] = bucket(rows, None if spans is None
                                                          else spans[g])
    return out


@contextmanager
def shared_decode_indices() -> Iterator[None]:
    """Within it, the decodes over the same tables share their indices (plan, block index,
    masks): the first layer of a step builds them and the others find them. Open one per
    step, around its forward (`ModelExecutor`), while no table it reads changes."""
    outer = _scratch.__dict__.get("memo")
    _scratch.memo = {}
    try:
        yield
    finally:
        _scratch.memo = outer


def _table_memo(kind: str, table: torch.Tensor, seq_lens: torch.Tensor, *params) -> dict | None:
    """The entry of the open `shared_decode_indices` for a decode over `table` (block tables
    or start slots) and `seq_lens` (None outside one): within a step the same memory and
    shape hold the same indices, and the tensors stay alive until it ends."""
    memo = _scratch.__dict__.get("memo")
    if memo is None:
        return None
    key = (kind, table.data_ptr(), tuple(table.shape), tuple(table.stride()),
           seq_lens.data_ptr(), tuple(seq_lens.shape), *params)
    return memo.setdefault(key, {})


def _step_gather(memo: dict | None, kind: str, index_of: Callable, take: Callable) -> Gather:
    """A `Gather` whose index (`index_of(rows, first, span)`) is built by a step's first
    layer and kept in `memo` (its `shared_decode_indices` entry) for the rest; each call
    reads K/V through it (`take(*index)`)."""
    def gather(rows: torch.Tensor | None, first: torch.Tensor | None, span: int):
        if memo is None:
            return take(*index_of(rows, first, span))
        key = (kind, None if rows is None else id(rows), span)  # rows: the memo's tensor
        found = memo.get(key)
        if found is None:
            found = memo[key] = index_of(rows, first, span)
        return take(*found)

    return gather


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
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the cache.

    With a window only the blocks holding positions inside it are read. Inside
    `shared_decode_indices` the layers after a step's first find its decode indices (plan,
    block index, masks) instead of building them.
    """
    num_blocks = k_cache.shape[0] // block_size
    table_width = block_tables.shape[1]
    k_blocks, v_blocks = (
        (cache if cache.shape[0] == num_blocks * block_size else cache[: num_blocks * block_size])
        .view(num_blocks, block_size, *cache.shape[1:])
        for cache in (k_cache, v_cache)
    )

    memo = _table_memo("paged", block_tables, seq_lens, block_size, sliding_window)

    def block_index(rows: torch.Tensor | None, first: torch.Tensor | None, span: int):
        # Whole blocks at once: one index per block instead of one per token.
        tables = block_tables if rows is None else block_tables[rows]
        if sliding_window is None:  # every row from position 0: the table's first columns
            width = min(-(-span // block_size), table_width)
            blocks = tables[:, :width].flatten()  # index_select takes int32 too
            # The last block's positions past the longest sequence are left out, not masked:
            # a batch of equal lengths then needs no mask at all.
            keys = min(span, width * block_size)
            key_pos = torch.arange(keys, device=q.device)
        else:
            first_block = first // block_size
            width = min(-(-(span + block_size - 1) // block_size), table_width)
            index = (first_block[:, None] + torch.arange(width, device=q.device)[None, :]).clamp(
                max=table_width - 1)
            blocks = tables.gather(1, index).long().flatten()
            key_pos = (first_block[:, None] * block_size
                       + torch.arange(width * block_size, device=q.device)[None, :])
            keys = width * block_size
        return blocks, key_pos, keys, width, tables.shape[0]

    def take(blocks: torch.Tensor, key_pos: torch.Tensor, keys: int, width: int, num_rows: int):
        def by_row(rows_of: torch.Tensor) -> torch.Tensor:
            rows_of = rows_of.view(num_rows, width * block_size, *rows_of.shape[2:])
            return rows_of if keys == width * block_size else rows_of[:, :keys]

        k, v = _gather_kv_float(k_blocks, v_blocks, blocks, k_scale, v_scale)
        return by_row(k), by_row(v), key_pos

    gather = _step_gather(memo, "blocks", block_index, take)
    key_bytes = (k_cache.shape[1] * (k_cache.shape[2] + v_cache.shape[-1]) * 4
                 if is_fp8(k_cache) else None)
    return _bucketed_decode(q, seq_lens, gather, softmax_scale, sliding_window, softcap, sinks,
                            v_cache.shape[-1], _fp8_fold(k_cache, k_scale),
                            _fp8_fold(v_cache, v_scale, as_tensor=True), memo, key_bytes)


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
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    ring_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode reading each sequence's K/V from `[start_slot, start_slot + seq_len)` (with a
    window, only its last W positions); with `ring_lens` (`[S]` int, a window group's
    rings) position p of sequence i from `start_slots[i] + p % ring_lens[i]`;
    `shared_decode_indices` as `paged_decode_attention`."""
    memo = _table_memo("contiguous", start_slots, seq_lens, sliding_window)
    if memo is None or "host" not in memo:  # the step's first layer (or no shared memo)
        lens = seq_lens.tolist()
        starts = start_slots.tolist()
        firsts = [first_visible(n, 1, sliding_window) for n in lens]
        num_kv_heads, head_dim = k_cache.shape[1:]
        keys = sum(lens) - sum(firsts)
        # One sequence is one attention call either way: in place it skips the gather (a
        # ring may wrap inside the window: gathered).
        in_place = bool(ring_lens is None and lens and (
            len(lens) == 1
            or keys * num_kv_heads * (head_dim + v_cache.shape[-1]) * 4 >= IN_PLACE_MIN_BYTES))
        if memo is not None:
            memo["host"] = lens, starts, firsts, in_place
    else:
        lens, starts, firsts, in_place = memo["host"]
    if in_place and k_cache.dtype == v_cache.dtype == torch.float32:
        out = torch.empty((*q.shape[:-1], v_cache.shape[-1]), dtype=q.dtype, device=q.device)
        for r, (start, n, f) in enumerate(zip(starts, lens, firsts, strict=True)):
            out[r : r + 1] = _decode(q[r : r + 1], k_cache[start + f : start + n][None],
                                     v_cache[start + f : start + n][None], None,
                                     softmax_scale, softcap, sinks)
        return out

    def token_slots(rows: torch.Tensor | None, first: torch.Tensor | None, span: int):
        row_starts = start_slots if rows is None else start_slots[rows]
        key_pos = torch.arange(span, device=q.device)
        if first is not None:  # a window: each row from its own first position
            key_pos = first[:, None] + key_pos[None, :]
        if ring_lens is None:
            slots = row_starts.long()[:, None] + key_pos
        else:  # masked padding positions wrap inside the ring too
            rings = (ring_lens if rows is None else ring_lens[rows]).long()[:, None]
            slots = row_starts.long()[:, None] + key_pos % rings
        # Padding positions may run past the arena's end; they are masked, so clamp the gather.
        return slots.clamp(max=k_cache.shape[0] - 1).flatten(), key_pos, len(row_starts), span

    def take(slots: torch.Tensor, key_pos: torch.Tensor, num_rows: int, span: int):
        k, v = _gather_kv_float(k_cache, v_cache, slots, k_scale, v_scale)
        return (k.view(num_rows, span, *k.shape[1:]), v.view(num_rows, span, *v.shape[1:]),
                key_pos)

    gather = _step_gather(memo, "slots", token_slots, take)
    return _bucketed_decode(q, seq_lens, gather, softmax_scale, sliding_window, softcap, sinks,
                            v_cache.shape[-1], _fp8_fold(k_cache, k_scale),
                            _fp8_fold(v_cache, v_scale, as_tensor=True), memo)
