"""The torch backend's attention: `kvbench.kernels.reference`'s results in fewer, larger
operations, for the CPU engine (it runs on any device). Tested against the reference
(tests/kernels/test_cpu_attention.py). The KV writes are the reference's own.

Where the time goes, and what this module does about it, on any CPU:

- a prefill attends each sequence alone with `scaled_dot_product_attention` (PyTorch's fused
  kernel: no `[Q, L]` score tensor), not the reference's padded batch;
- a decode gathers sequences of similar length together (`decode_buckets`): one gather and
  one attention call a bucket, the keys padded to the bucket's longest, which at most doubles
  the keys the bucket reads; one padded batch would cost batch x longest context;
- an fp8 cache is gathered as bytes and decoded with integer operations (`fp8_to_float_div_256`:
  PyTorch converts float8 one element at a time), its scales applied to the query or the
  attention's scale and to the output instead of to every key and value (`_fp8_fold`);
- a decode's gathers land in buffers kept per thread (`_gather`): a large step gathers tens
  of MB, and a fresh allocation that size is mapped anew by the C allocator each time, whose
  page faults can cost several times the copy.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .reference import (
    Scale,
    contiguous_slots,
    dequantize,
    first_visible,
    is_fp8,
    paged_slots,
    softmax_with_sinks,
)


def fp8_to_float_div_256(values: torch.Tensor) -> torch.Tensor:
    """fp8 `values` as float32 divided by 256 (the caller owes the 256, `_fp8_fold`): bit for
    bit `values.float() / 256`, in four vectorised passes.

    e4m3's bits moved into a float16 (sign to bit 15, exponent and mantissa to bits 13..7) are
    the same value times 2^-8, subnormals included. The one difference: e4m3's NaN (never
    written: `quantize_fp8` saturates) reads as 480 / 256.
    """
    bits = values.view(torch.int8).to(torch.int16)  # sign-extended: bits 15..7 carry the sign
    bits.mul_(128)  # << 7
    bits.bitwise_and_(~0x4000)  # float16's top exponent bit: always 0 for an e4m3 value
    return bits.view(torch.float16).float()


def _fp8_fold(cache: torch.Tensor, scale: Scale) -> torch.Tensor | float | None:
    """What a decode over `fp8_to_float_div_256` values still owes each KV head: `256 * scale`, a
    number (one scale) or `[Hkv, 1, 1]` (to broadcast over `[S, Hkv, group, D]`); None for an
    unquantized cache. A float32 scale times 256 is exact."""
    if not is_fp8(cache):
        return None
    if scale is None:
        return 256.0
    scale = torch.as_tensor(scale, dtype=torch.float32)
    if scale.dim() == 0 and scale.device.type == "cpu":
        return scale.item() * 256.0
    fold = scale.to(cache.device) * 256.0  # (a device's scale stays there: no sync)
    return fold.reshape(-1, 1, 1) if fold.dim() else fold


_gather_buffers = threading.local()


def _gather(rows_of: torch.Tensor, index: torch.Tensor, role: str) -> torch.Tensor:
    """`rows_of[index]` as float32; fp8 rows are gathered as bytes (a quarter of the traffic)
    and left owing their `_fp8_fold`. The rows land in this thread's buffer for `role`, grown
    as needed: the result is valid until the next gather for the same role."""
    shape = (index.numel(), *rows_of.shape[1:])
    needed = math.prod(shape)
    # An inference tensor cannot be written outside inference mode: one buffer for each.
    key = f"{role}_inference" if torch.is_inference_mode_enabled() else role
    buffer = getattr(_gather_buffers, key, None)
    if (buffer is None or buffer.numel() < needed or buffer.dtype != rows_of.dtype
            or buffer.device != rows_of.device):
        buffer = torch.empty(needed, dtype=rows_of.dtype, device=rows_of.device)
        setattr(_gather_buffers, key, buffer)
    rows = torch.index_select(rows_of, 0, index, out=buffer[:needed].view(shape))
    if is_fp8(rows):
        return fp8_to_float_div_256(rows)
    return rows if rows.dtype == torch.float32 else rows.float()


def _attend(q, k, v, softmax_scale, first_key=0, sliding_window=None, softcap=None,
            sinks=None) -> torch.Tensor:
    """Causal attention of the last `n` positions (q `[n, Hq, D]`) over `k`, `v` `[L, Hkv, D]`
    (float32), the keys of positions `first_key .. first_key + L - 1`."""
    n = q.shape[0]
    seq_len = first_key + k.shape[0]
    # [1, H, n, D] with enable_gqa: query head h reads KV head h // group without repeated K/V.
    # Heads as SDPA's head dimension (not broadcast batch dims) keep PyTorch on its fused CPU
    # kernel; a broadcast K/V batch falls back to the math path.
    qf = q.float().transpose(0, 1)[None]
    kf = k.transpose(0, 1)[None]
    vf = v.transpose(0, 1)[None]
    plain = softcap is None and sinks is None
    if plain and n == seq_len and sliding_window is None:
        out = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True, scale=softmax_scale,
                                             enable_gqa=True)
        return out[0].transpose(0, 1)
    # Query i sits at position seq_len - n + i (causal, bottom-right).
    query_pos = torch.arange(seq_len - n, seq_len, device=q.device)
    key_pos = torch.arange(first_key, seq_len, device=q.device)
    visible = key_pos[None, :] <= query_pos[:, None]
    if sliding_window is not None:
        visible &= key_pos[None, :] > query_pos[:, None] - sliding_window
    if plain:
        out = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=visible, scale=softmax_scale,
                                             enable_gqa=True)
        return out[0].transpose(0, 1)
    group = q.shape[1] // k.shape[1]
    kf = kf.repeat_interleave(group, dim=1)
    vf = vf.repeat_interleave(group, dim=1)
    scores = qf @ kf.transpose(-1, -2) * softmax_scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~visible, float("-inf"))
    head_sinks = None if sinks is None else sinks.reshape(1, -1, 1, 1)
    return (softmax_with_sinks(scores, head_sinks) @ vf)[0].transpose(0, 1)


def _varlen_attention(q, k_cache, v_cache, query_start_loc, seq_lens, slots_of, softmax_scale,
                      k_scale, v_scale, sliding_window=None, softcap=None,
                      sinks=None) -> torch.Tensor:
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    out = torch.empty((*q.shape[:-1], v_cache.shape[-1]), dtype=q.dtype, device=q.device)
    for i, n in enumerate(lens):
        lo, hi = starts[i], starts[i + 1]
        if hi == lo:
            continue
        first = first_visible(n, hi - lo, sliding_window)
        slots = slots_of(i, n, first)
        k = dequantize(k_cache[slots], k_scale)
        v = dequantize(v_cache[slots], v_scale)
        out[lo:hi] = _attend(q[lo:hi], k, v, softmax_scale, first, sliding_window, softcap,
                             sinks)
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
    """`reference.paged_attention`, one sequence at a time."""
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
    """`reference.contiguous_attention`, one sequence at a time."""
    starts = start_slots.tolist()
    rings = [0] * len(starts) if ring_lens is None else ring_lens.tolist()
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n, first: contiguous_slots(starts[i], n, q.device, first, rings[i]),
        softmax_scale, k_scale, v_scale, sliding_window, softcap, sinks,
    )


def decode_buckets(spans: list[int]) -> list[list[int]]:
    """Rows grouped, longest first, so that padding each group's rows to its longest span at
    most doubles the keys the group reads. One padded batch would cost batch x longest
    context; with ragged (chat-like) lengths the groups cost at most twice the sum of the
    contexts, which is what the attention itself needs, in few calls: a short row joins a
    group of long ones while their keys outweigh its padding."""
    order = sorted(range(len(spans)), key=lambda i: -spans[i])
    buckets: list[list[int]] = []
    keys = 0  # of the last bucket's rows
    for i in order:
        if buckets and (len(buckets[-1]) + 1) * spans[buckets[-1][0]] <= 2 * (keys + spans[i]):
            buckets[-1].append(i)
            keys += spans[i]
        else:
            buckets.append([i])
            keys = spans[i]
    return buckets


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
    qf = q.float().reshape(num_seqs, num_kv_heads, group, head_dim)
    if isinstance(k_fold, float):  # q . (k f) s = (q . k) (f s)
        softmax_scale = softmax_scale * k_fold
    elif k_fold is not None:  # per KV head: q . (k f) = (q f) . k
        qf = qf * k_fold
    mask = None if valid is None else valid[:, None, None, :]
    if softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=softmax_scale)
    else:
        scores = qf @ kf.transpose(-1, -2) * softmax_scale  # [S, Hkv, group, W]
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        head_sinks = None if sinks is None else sinks.reshape(1, num_kv_heads, group, 1)
        probs = softmax_with_sinks(scores, head_sinks)
        if mask is not None:  # a sequence of no keys attends nothing, as SDPA's rows do
            probs = probs.where(mask.any(-1, keepdim=True), 0.0)
        out = probs @ vf
    if v_fold is not None:  # sum p (v f) = (sum p v) f
        out = out * v_fold
    return out.reshape(num_seqs, num_q_heads, vf.shape[-1]).to(q.dtype)


# index_of(rows, first, span) -> (index, key_pos, row_keys, keys): the cache rows to gather
# for sequences `rows` (`[R]` long, None: all) from about position `first[r]` (`[R]` long;
# None without a window: 0) on, at least `span` positions each, `row_keys` gathered per row
# of which the first `keys` are kept, with the position of each kept key (`[keys]` shared by
# every row, or `[R, keys]`); keys outside a row's `[first, seq_len)` are masked, so a gather
# may read whole blocks around them.
IndexOf = Callable[[torch.Tensor | None, torch.Tensor | None, int],
                   tuple[torch.Tensor, torch.Tensor, int, int]]


def _bucketed_decode(q, seq_lens, sliding_window, index_of: IndexOf, k_rows, v_rows,
                     softmax_scale, softcap, sinks, k_fold, v_fold) -> torch.Tensor:
    """One gather from `k_rows`/`v_rows` and one attention per `decode_buckets` bucket; a
    window caps each sequence's keys at W, so the cost grows with W, not with the context."""
    device = q.device
    lens = seq_lens.tolist()
    firsts = [first_visible(n, 1, sliding_window) for n in lens]
    spans = [max(n - f, 1) for n, f in zip(lens, firsts, strict=True)]
    buckets = decode_buckets(spans)
    if len(buckets) == 1:
        buckets = [list(range(len(lens)))]  # every row, in order: no gather of q or out
    else:
        out = torch.empty((*q.shape[:-1], v_rows.shape[-1]), dtype=q.dtype, device=device)
    for chosen in buckets:
        rows = None if len(buckets) == 1 else torch.tensor(chosen, device=device)
        span = max(spans[i] for i in chosen)
        first = (None if sliding_window is None
                 else torch.tensor([firsts[i] for i in chosen], device=device))
        index, key_pos, row_keys, keys = index_of(rows, first, span)
        valid = None
        if keys != span or any(firsts[i] or spans[i] != span for i in chosen):
            row_lens = seq_lens.long() if rows is None else seq_lens.long()[rows]
            valid = key_pos < row_lens[:, None]
            if first is not None:
                valid &= key_pos >= first[:, None]
        k, v = (_gather(cache_rows, index, role).view(len(chosen), row_keys,
                                                      *cache_rows.shape[-2:])[:, :keys]
                for cache_rows, role in ((k_rows, "k"), (v_rows, "v")))
        attended = _decode(q if rows is None else q[rows], k, v, valid, softmax_scale, softcap,
                           sinks, k_fold, v_fold)
        if rows is None:
            return attended
        out[rows] = attended
    return out


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
    """`reference.paged_decode_attention`, reading whole blocks (one index a block, not a
    token); with a window only the blocks holding positions inside it."""
    if q.shape[0] == 0:
        return q.new_empty((*q.shape[:-1], v_cache.shape[-1]))
    num_blocks = k_cache.shape[0] // block_size
    table_width = block_tables.shape[1]
    k_blocks, v_blocks = (cache[: num_blocks * block_size].view(num_blocks, block_size,
                                                                 *cache.shape[1:])
                          for cache in (k_cache, v_cache))

    def index_of(rows: torch.Tensor | None, first: torch.Tensor | None, span: int):
        tables = block_tables if rows is None else block_tables[rows]
        if first is None:  # every row from position 0: the table's first columns
            width = min(-(-span // block_size), table_width)
            blocks = tables[:, :width].flatten()
            # The last block's positions past the longest sequence are left out, not masked:
            # a batch of equal lengths then needs no mask at all.
            keys = min(span, width * block_size)
            key_pos = torch.arange(keys, device=q.device)
        else:
            first_block = first // block_size
            width = min(-(-(span + block_size - 1) // block_size), table_width)
            column = (first_block[:, None] + torch.arange(width, device=q.device)[None, :])
            blocks = tables.gather(1, column.clamp(max=table_width - 1)).flatten()
            key_pos = (first_block[:, None] * block_size
                       + torch.arange(width * block_size, device=q.device)[None, :])
            keys = width * block_size
        return blocks.long(), key_pos, width * block_size, keys

    return _bucketed_decode(q, seq_lens, sliding_window, index_of, k_blocks, v_blocks,
                            softmax_scale, softcap, sinks, _fp8_fold(k_cache, k_scale),
                            _fp8_fold(v_cache, v_scale))


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
    """`reference.contiguous_decode_attention`, each bucket's K/V gathered by one index."""
    if q.shape[0] == 0:
        return q.new_empty((*q.shape[:-1], v_cache.shape[-1]))

    def index_of(rows: torch.Tensor | None, first: torch.Tensor | None, span: int):
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
        return slots.clamp(max=k_cache.shape[0] - 1).flatten(), key_pos, span, span

    return _bucketed_decode(q, seq_lens, sliding_window, index_of, k_cache, v_cache,
                            softmax_scale, softcap, sinks, _fp8_fold(k_cache, k_scale),
                            _fp8_fold(v_cache, v_scale))
