"""PyTorch reference kernels: the readable definition of what every attention backend computes,
and the oracle the Triton kernels and the CPU kernels (`kvbench.kernels.cpu_attention`) are
tested against. Nothing here is tuned for speed.

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

Each call is one gather and one padded attention for the whole batch: every sequence's
visible keys are gathered into `[S, L, Hkv, D]` (L: the most any sequence sees), its queries
into `[S, Q, Hq, D]` (Q: the most new tokens any sequence has), and a mask keeps each query to
its own causal (windowed) keys; a query that sees no key gives zeros. A decode is the case
Q = 1. All arithmetic is float32; outputs take `q`'s dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value

Scale = float | torch.Tensor | None


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == FP8_DTYPE


def _scale_tensor(scale: Scale, device: torch.device) -> torch.Tensor:
    """A per-tensor scale as a 0-d tensor, a per-head scale `[Hkv]` as `[Hkv, 1]` (to
    broadcast over `[..., Hkv, D]`)."""
    if scale is None:
        return torch.ones((), dtype=torch.float32, device=device)
    t = torch.as_tensor(scale, dtype=torch.float32, device=device)
    return t.reshape(-1, 1) if t.dim() == 1 else t


def quantize_fp8(x: torch.Tensor, scale: Scale) -> torch.Tensor:
    """`x / scale` saturated to the e4m3 range, as `float8_e4m3fn`. `x`: `[..., Hkv, D]`."""
    scaled = x.float() / _scale_tensor(scale, x.device)
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def dequantize(cache_values: torch.Tensor, scale: Scale) -> torch.Tensor:
    """Cache contents `[..., Hkv, D]` as float32 (fp8 values times their scale)."""
    if is_fp8(cache_values):
        return cache_values.float() * _scale_tensor(scale, cache_values.device)
    return cache_values.float()


def _as_cache(x: torch.Tensor, cache: torch.Tensor, scale: Scale) -> torch.Tensor:
    if is_fp8(cache):
        return quantize_fp8(x, scale)
    return x if x.dtype == cache.dtype else x.to(cache.dtype)


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
    slots = (slot_mapping.long(),)
    k_cache.index_put_(slots, _as_cache(k, k_cache, k_scale))
    v_cache.index_put_(slots, _as_cache(v, v_cache, v_scale))


def write_latent(
    row: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, scale: Scale = None
) -> None:
    """Scatter new tokens' latent-attention rows `[T, 1, latent + rope]` into their slots: one
    tensor, since the value is a view of it."""
    cache.index_put_((slot_mapping.long(),), _as_cache(row, cache, scale))


def paged_slots(block_table: torch.Tensor, seq_len: int, block_size: int,
                first: int = 0) -> torch.Tensor:
    """Slots of positions `first..seq_len-1` of one sequence through its block table."""
    pos = torch.arange(first, seq_len, device=block_table.device)
    return block_table.long()[pos // block_size] * block_size + pos % block_size


def contiguous_slots(start_slot: int, seq_len: int, device: torch.device,
                     first: int = 0, ring_len: int = 0) -> torch.Tensor:
    """Slots of positions `first..seq_len-1` of one sequence from `start_slot`; with a
    `ring_len` (0: none) position p lives at `start_slot + p % ring_len`."""
    pos = torch.arange(first, seq_len, device=device)
    return start_slot + (pos % ring_len if ring_len else pos)


def first_visible(seq_len: int, num_queries: int, sliding_window: int | None) -> int:
    """The first key position any of a sequence's last `num_queries` queries sees."""
    if sliding_window is None:
        return 0
    return max(0, seq_len - num_queries - sliding_window + 1)


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension of `scores`; `sinks` (broadcastable to
    `[..., 1]`) join each denominator and take no share of the output."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.float().expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]


# slots_of(i, first, seq_len) -> the slots of positions first..seq_len-1 of sequence i
SlotsOf = Callable[[int, int, int], torch.Tensor]


def _attention(q, k_cache, v_cache, query_start_loc, seq_lens, slots_of: SlotsOf,
               softmax_scale, k_scale, v_scale, sliding_window, softcap,
               sinks) -> torch.Tensor:
    """Varlen causal attention: one gather and one padded attention for the batch."""
    device = q.device
    num_kv_heads, head_dim_v = v_cache.shape[1], v_cache.shape[-1]
    out = torch.empty((*q.shape[:-1], head_dim_v), dtype=q.dtype, device=device)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    q_lens = [hi - lo for lo, hi in zip(starts[:-1], starts[1:], strict=True)]
    firsts = [first_visible(n, m, sliding_window) for n, m in zip(lens, q_lens, strict=True)]
    if not lens or max(q_lens) == 0:
        return out
    num_keys = max(1, max(n - f for n, f in zip(lens, firsts, strict=True)))
    num_queries = max(q_lens)

    # Gather: row i holds the keys of positions firsts[i]..lens[i]-1, then padding: slot 0,
    # read and then zeroed (a slot no sequence owns may hold anything, NaN included).
    slots = torch.zeros(len(lens), num_keys, dtype=torch.long, device=device)
    for i, (n, first) in enumerate(zip(lens, firsts, strict=True)):
        slots[i, : n - first] = slots_of(i, first, n)
    key_pos = (torch.tensor(firsts, device=device)[:, None]
               + torch.arange(num_keys, device=device))  # [S, L]
    seq_len_col = torch.tensor(lens, device=device)[:, None]
    in_sequence = key_pos < seq_len_col
    k = dequantize(k_cache[slots], k_scale).where(in_sequence[:, :, None, None], 0.0)  # [S, L, Hkv, D]
    v = dequantize(v_cache[slots], v_scale).where(in_sequence[:, :, None, None], 0.0)

    # Queries padded to [S, Q, Hq, D]: query j of sequence i is token starts[i] + j.
    column = torch.arange(num_queries, device=device)
    q_rows = torch.tensor(starts[:-1], device=device)[:, None] + column
    is_query = column < torch.tensor(q_lens, device=device)[:, None]  # [S, Q]
    qf = q.float()[q_rows.clamp(max=q.shape[0] - 1)]
    num_seqs, _, num_q_heads, head_dim = qf.shape
    group = num_q_heads // num_kv_heads
    qf = qf.view(num_seqs, num_queries, num_kv_heads, group, head_dim)

    # Positions: query j of sequence i sits at lens[i] - q_lens[i] + j (causal, bottom-right).
    query_pos = seq_len_col - torch.tensor(q_lens, device=device)[:, None] + column  # [S, Q]
    visible = in_sequence[:, None, :] & (key_pos[:, None, :] <= query_pos[:, :, None])
    if sliding_window is not None:
        visible &= key_pos[:, None, :] > query_pos[:, :, None] - sliding_window

    # Query head h reads KV head h // group.
    scores = torch.einsum("sqhgd,slhd->shgql", qf, k) * softmax_scale  # [S, Hkv, G, Q, L]
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
    head_sinks = None if sinks is None else sinks.reshape(num_kv_heads, group, 1, 1)
    # A query that sees no key (a sequence of none, a padding query) attends nothing: zeros.
    sees_a_key = visible.any(-1)[:, None, None, :, None]
    probs = softmax_with_sinks(scores, head_sinks).where(sees_a_key, 0.0)
    attended = torch.einsum("shgql,slhd->sqhgd", probs, v)
    attended = attended.reshape(num_seqs, num_queries, num_q_heads, head_dim_v)
    out[q_rows[is_query]] = attended[is_query].to(q.dtype)
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
    return _attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, first, n: paged_slots(block_tables[i], n, block_size, first),
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
    return _attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, first, n: contiguous_slots(starts[i], n, q.device, first, rings[i]),
        softmax_scale, k_scale, v_scale, sliding_window, softcap, sinks,
    )


def _one_query_each(q: torch.Tensor) -> torch.Tensor:
    return torch.arange(q.shape[0] + 1, device=q.device)


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
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the
    cache; `paged_attention` with one query a sequence."""
    return paged_attention(q, k_cache, v_cache, block_tables, _one_query_each(q), seq_lens,
                           block_size, softmax_scale, k_scale, v_scale,
                           sliding_window=sliding_window, softcap=softcap, sinks=sinks)


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
    """Decode over a contiguous cache: `contiguous_attention` with one query a sequence."""
    return contiguous_attention(q, k_cache, v_cache, start_slots, _one_query_each(q), seq_lens,
                                softmax_scale, k_scale, v_scale, sliding_window=sliding_window,
                                softcap=softcap, sinks=sinks, ring_lens=ring_lens)
