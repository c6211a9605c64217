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

from collections.abc import Callable

import torch
import torch.nn.functional as F

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value

Scale = float | torch.Tensor | None

# A decode bucket takes a shorter sequence while padding it at most doubles its keys, or adds
# at most this many positions: below that, the padded keys cost less than another bucket's
# fixed cost (gather + attention call) on a CPU.
DECODE_BUCKET_SLACK = 256


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == FP8_DTYPE


def _scale_tensor(scale: Scale, device: torch.device) -> torch.Tensor:
    """A per-tensor scale as a 0-d tensor, a per-head scale `[Hkv]` as `[Hkv, 1]`."""
    if scale is None:
        return torch.ones((), dtype=torch.float32, device=device)
    t = torch.as_tensor(scale, dtype=torch.float32, device=device)
    return t.reshape(-1, 1) if t.dim() == 1 else t


def quantize_fp8(x: torch.Tensor, scale: Scale) -> torch.Tensor:
    """`x / scale` saturated to the e4m3 range, as `float8_e4m3fn`. `x`: `[..., Hkv, D]`."""
    s = _scale_tensor(scale, x.device)
    return (x.float() / s).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def dequantize(cache_values: torch.Tensor, scale: Scale) -> torch.Tensor:
    """Cache contents `[..., Hkv, D]` as float32 (multiplying fp8 values by their scale)."""
    if is_fp8(cache_values):
        return cache_values.float() * _scale_tensor(scale, cache_values.device)
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
    slots = slot_mapping.long()
    if is_fp8(k_cache):
        k_cache[slots] = quantize_fp8(k, k_scale)
        v_cache[slots] = quantize_fp8(v, v_scale)
    else:
        k_cache[slots] = k.to(k_cache.dtype)
        v_cache[slots] = v.to(v_cache.dtype)


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
                     first: int = 0) -> torch.Tensor:
    return torch.arange(start_slot + first, start_slot + seq_len, device=device)


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
    out = torch.empty((*q.shape[:-1], v_cache.shape[-1]), dtype=q.dtype, device=q.device)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for i, seq_len in enumerate(lens):
        lo, hi = starts[i], starts[i + 1]
        if hi == lo:
            continue
        first = first_visible(seq_len, hi - lo, sliding_window)
        slots = slots_of(i, seq_len, first)
        k = dequantize(k_cache.index_select(0, slots), k_scale)
        v = dequantize(v_cache.index_select(0, slots), v_scale)
        out[lo:hi] = _attend(q[lo:hi], k, v, softmax_scale, first, sliding_window, softcap,
                             sinks).to(q.dtype)
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
) -> torch.Tensor:
    """Varlen causal attention reading each sequence from `[start_slot, start_slot + len)`."""
    starts = start_slots.tolist()
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n, first: contiguous_slots(starts[i], n, q.device, first),
        softmax_scale, k_scale, v_scale, sliding_window, softcap, sinks,
    )


# gather(rows, first, span) -> (k, v, key_pos): the cache rows of sequences `rows` from about
# position `first[r]` (`[R]` long) on, at least `span` positions each, `[R, W, Hkv, D]` in the
# cache's dtype with the position of each gathered key `[R, W]`; keys outside a row's
# `[first, seq_len)` are masked, so a gather may read whole blocks around them.
Gather = Callable[[torch.Tensor, torch.Tensor, int],
                  tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _decode(q, k, v, key_pos, first, seq_lens, softmax_scale, k_scale, v_scale, softcap, sinks):
    """One query per sequence (`q` `[S, Hq, D]`) over gathered `k`, `v` `[S, W, Hkv, D]`.

    Each KV head's group of query heads is the query "length" of one scaled-dot-product
    attention over that head's keys, so GQA needs no repeated K/V.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads, value_dim = k.shape[2], v.shape[-1]
    group = num_q_heads // num_kv_heads
    kf = dequantize(k, k_scale).transpose(1, 2)  # [S, Hkv, W, D]
    vf = dequantize(v, v_scale).transpose(1, 2)
    qf = q.float().reshape(num_seqs, num_kv_heads, group, head_dim)
    valid = (key_pos < seq_lens.long()[:, None]) & (key_pos >= first[:, None])
    if softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(
            qf, kf, vf, attn_mask=valid[:, None, None, :], scale=softmax_scale
        )
    else:
        head_sinks = None if sinks is None else sinks.reshape(1, num_kv_heads, group, 1)
        scores = qf @ kf.transpose(-1, -2) * softmax_scale  # [S, Hkv, group, W]
        probs = _scores_softmax(scores, valid[:, None, None, :], softcap, head_sinks)
        out = probs @ vf
    return out.reshape(num_seqs, num_q_heads, value_dim).to(q.dtype)


def _bucketed_decode(q, seq_lens, gather: Gather, softmax_scale, k_scale, v_scale,
                     sliding_window=None, softcap=None, sinks=None, v_head_dim=None):
    """Decode in buckets of similar length, so padding at most doubles the keys read (or adds
    at most `DECODE_BUCKET_SLACK` positions).

    One padded batch would cost batch × longest context; with ragged (chat-like) lengths the
    buckets cost about the sum of the contexts, which is what the attention itself needs. A
    window caps each sequence's keys at W, so the cost grows with W, not with the context.
    """
    out_shape = q.shape if v_head_dim is None else (*q.shape[:-1], v_head_dim)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return out
    lens = seq_lens.tolist()
    firsts = [first_visible(n, 1, sliding_window) for n in lens]
    spans = [n - f for n, f in zip(lens, firsts, strict=True)]
    order = sorted(range(len(lens)), key=lambda i: -spans[i])
    start = 0
    while start < len(order):
        longest = spans[order[start]]
        end = start + 1
        while end < len(order) and (
            2 * spans[order[end]] >= longest or longest - spans[order[end]] <= DECODE_BUCKET_SLACK
        ):
            end += 1
        chosen = order[start:end]
        rows = torch.tensor(chosen, device=q.device)
        first = torch.tensor([firsts[i] for i in chosen], device=q.device)
        k, v, key_pos = gather(rows, first, max(longest, 1))
        out[rows] = _decode(q[rows], k, v, key_pos, first, seq_lens[rows], softmax_scale,
                            k_scale, v_scale, softcap, sinks)
        start = end
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
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the cache.

    With a window only the blocks holding positions inside it are read.
    """
    num_blocks = k_cache.shape[0] // block_size
    table_width = block_tables.shape[1]

    def gather(rows: torch.Tensor, first: torch.Tensor, span: int):
        # Whole blocks at once: one index per block instead of one per token.
        first_block = first // block_size
        width = min(-(-(span + block_size - 1) // block_size), table_width)
        if sliding_window is None:
            width = min(-(-span // block_size), table_width)
        index = (first_block[:, None] + torch.arange(width, device=q.device)[None, :]).clamp(
            max=table_width - 1)
        blocks = block_tables[rows[:, None], index].long().flatten()
        key_pos = (first_block[:, None] * block_size
                   + torch.arange(width * block_size, device=q.device)[None, :])

        def take(cache: torch.Tensor) -> torch.Tensor:
            by_block = cache[: num_blocks * block_size].view(num_blocks, block_size,
                                                            *cache.shape[1:])
            return by_block.index_select(0, blocks).view(len(rows), width * block_size,
                                                         *cache.shape[1:])

        return take(k_cache), take(v_cache), key_pos

    return _bucketed_decode(q, seq_lens, gather, softmax_scale, k_scale, v_scale,
                            sliding_window, softcap, sinks, v_cache.shape[-1])


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
) -> torch.Tensor:
    """Decode reading each sequence's K/V from `[start_slot, start_slot + seq_len)` (with a
    window, only its last W positions)."""
    def gather(rows: torch.Tensor, first: torch.Tensor, span: int):
        key_pos = first[:, None] + torch.arange(span, device=q.device)[None, :]
        slots = start_slots[rows].long()[:, None] + key_pos
        # Padding positions may run past the arena's end; they are masked, so clamp the gather.
        slots = slots.clamp(max=k_cache.shape[0] - 1).flatten()

        def take(cache: torch.Tensor) -> torch.Tensor:
            return cache.index_select(0, slots).view(len(rows), span, *cache.shape[1:])

        return take(k_cache), take(v_cache), key_pos

    return _bucketed_decode(q, seq_lens, gather, softmax_scale, k_scale, v_scale,
                            sliding_window, softcap, sinks, v_cache.shape[-1])
