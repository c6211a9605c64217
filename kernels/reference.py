"""PyTorch reference kernels: the CPU execution path and the ground truth for the Triton kernels.

Shapes (T: new tokens in the batch, S: sequences, Hq/Hkv: query/KV heads, D: head dim):

- `q`: `[T, Hq, D]` for varlen attention, `[S, Hq, D]` for decode;
- `k_cache`, `v_cache`: `[num_slots, Hkv, D]`, any float dtype or `float8_e4m3fn`;
- `query_start_loc`: `[S + 1]` int, sequence `i` owns `q[query_start_loc[i]:query_start_loc[i+1]]`,
  which are the *last* tokens of its `seq_lens[i]` tokens (cached prefix + new), causal;
- `block_tables`: `[S, max_blocks]` int (paged), `start_slots`: `[S]` int (contiguous).

All arithmetic is float32; outputs take `q`'s dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value

Scale = float | torch.Tensor | None


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


def paged_slots(block_table: torch.Tensor, seq_len: int, block_size: int) -> torch.Tensor:
    """Slots of positions `0..seq_len-1` of one sequence through its block table."""
    pos = torch.arange(seq_len, device=block_table.device)
    return block_table.long()[pos // block_size] * block_size + pos % block_size


def contiguous_slots(start_slot: int, seq_len: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start_slot, start_slot + seq_len, device=device)


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """Causal attention of the last `n` positions (q `[n, Hq, D]`) over `k`, `v` `[L, Hkv, D]`."""
    n, num_q_heads, head_dim = q.shape
    seq_len, num_kv_heads, _ = k.shape
    group = num_q_heads // num_kv_heads
    # [Hkv, G*n, D]: each KV head's query heads stacked as rows of one attention
    qf = q.float().reshape(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
    query_pos = torch.arange(seq_len - n, seq_len, device=q.device)
    key_pos = torch.arange(seq_len, device=q.device)
    visible = key_pos[None, :] <= query_pos[:, None]  # [n, L], causal with a cached prefix
    out = F.scaled_dot_product_attention(
        qf, k.transpose(0, 1)[:, None], v.transpose(0, 1)[:, None], attn_mask=visible,
        scale=softmax_scale,
    )  # [Hkv, G, n, D]
    return out.permute(2, 0, 1, 3).reshape(n, num_q_heads, head_dim)


def _varlen_attention(q, k_cache, v_cache, query_start_loc, seq_lens, slots_of, softmax_scale,
                      k_scale, v_scale) -> torch.Tensor:
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for i, seq_len in enumerate(lens):
        lo, hi = starts[i], starts[i + 1]
        if hi == lo:
            continue
        slots = slots_of(i, seq_len)
        k = dequantize(k_cache[slots], k_scale)
        v = dequantize(v_cache[slots], v_scale)
        out[lo:hi] = _attend(q[lo:hi], k, v, softmax_scale).to(q.dtype)
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
) -> torch.Tensor:
    """Varlen causal attention (prefill, chunked prefill, prefix hits) through block tables."""
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n: paged_slots(block_tables[i], n, block_size),
        softmax_scale, k_scale, v_scale,
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
) -> torch.Tensor:
    """Varlen causal attention reading each sequence from `[start_slot, start_slot + len)`."""
    starts = start_slots.tolist()
    return _varlen_attention(
        q, k_cache, v_cache, query_start_loc, seq_lens,
        lambda i, n: contiguous_slots(starts[i], n, q.device),
        softmax_scale, k_scale, v_scale,
    )


def _decode(q, k_cache, v_cache, slots, seq_lens, softmax_scale, k_scale, v_scale):
    """One query per sequence over gathered `slots` `[S, L]` (padding masked by `seq_lens`).

    Each KV head's group of query heads is the query "length" of one scaled-dot-product
    attention over that head's keys, so GQA needs no repeated K/V.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    k = dequantize(k_cache[slots], k_scale).transpose(1, 2)  # [S, Hkv, L, D]
    v = dequantize(v_cache[slots], v_scale).transpose(1, 2)
    qf = q.float().reshape(num_seqs, num_kv_heads, group, head_dim)
    valid = torch.arange(slots.shape[1], device=q.device)[None, :] < seq_lens.long()[:, None]
    out = F.scaled_dot_product_attention(
        qf, k, v, attn_mask=valid[:, None, None, :], scale=softmax_scale
    )
    return out.reshape(num_seqs, num_q_heads, head_dim).to(q.dtype)


def _bucketed_decode(q, k_cache, v_cache, seq_lens, slots_of, softmax_scale, k_scale, v_scale):
    """Decode in buckets of similar length, so padding at most doubles the keys read.

    One padded batch would cost batch × longest context; with ragged (chat-like) lengths the
    buckets cost about the sum of the contexts, which is what the attention itself needs.
    """
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return out
    lens = seq_lens.tolist()
    order = sorted(range(len(lens)), key=lambda i: -lens[i])
    start = 0
    while start < len(order):
        longest = lens[order[start]]
        end = start + 1
        while end < len(order) and 2 * lens[order[end]] >= longest:
            end += 1
        rows = torch.tensor(order[start:end], device=q.device)
        slots = slots_of(rows, max(longest, 1))
        out[rows] = _decode(q[rows], k_cache, v_cache, slots, seq_lens[rows], softmax_scale,
                            k_scale, v_scale)
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
) -> torch.Tensor:
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the cache."""
    max_blocks = block_tables.shape[1]

    def slots_of(rows: torch.Tensor, max_len: int) -> torch.Tensor:
        pos = torch.arange(max_len, device=q.device)
        block_idx = (pos // block_size).clamp(max=max_blocks - 1)
        return block_tables[rows].long()[:, block_idx] * block_size + pos % block_size

    return _bucketed_decode(q, k_cache, v_cache, seq_lens, slots_of, softmax_scale, k_scale,
                            v_scale)


def contiguous_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_slots: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
) -> torch.Tensor:
    """Decode reading each sequence's K/V from `[start_slot, start_slot + seq_len)`."""
    def slots_of(rows: torch.Tensor, max_len: int) -> torch.Tensor:
        pos = torch.arange(max_len, device=q.device)
        slots = start_slots[rows].long()[:, None] + pos[None, :]
        # Padding positions may run past the arena's end; they are masked, so clamp the gather.
        return slots.clamp(max=k_cache.shape[0] - 1)

    return _bucketed_decode(q, k_cache, v_cache, seq_lens, slots_of, softmax_scale, k_scale,
                            v_scale)
