"""The torch backend's attention (`kvbench.kernels.cpu_attention`) against the reference:
paged and contiguous, prefill and decode, every score variant, GQA, latent attention (V a
view of K), float32, bfloat16 and fp8 caches (one scale and one a KV head), ragged lengths
(the decode's length buckets). Slots no sequence owns hold large values: a kernel may read
them as padding it masks (an arena is zeroed, then keeps what its last owner wrote), but
attending one changes the output."""

from __future__ import annotations

import pytest
import torch

from kvbench.kernels import cpu_attention as cpu
from kvbench.kernels import reference as ref

TOL = dict(rtol=1e-5, atol=1e-5)


def test_fp8_decoding_is_exact_for_every_byte():
    every = torch.arange(256, dtype=torch.uint8).view(ref.FP8_DTYPE)
    values = every.reshape(128, 2, 1).expand(128, 2, 3)  # [N, Hkv, D], a strided view
    want = values.float()
    got = cpu.fp8_to_float_div_256(values) * 256
    finite = ~want.isnan()
    assert finite.sum() == 254 * 3
    assert torch.equal(got[finite], want[finite])
    assert torch.equal(got[finite].signbit(), want[finite].signbit())  # -0.0 stays -0.0


@pytest.mark.parametrize("spans", [[1, 700, 3, 64, 65, 1000, 2, 129, 400], [50] * 7,
                                   [300] * 20 + [5, 9], [1], [2**i for i in range(12)]])
def test_decode_buckets_at_most_double_the_keys_read(spans):
    buckets = cpu.decode_buckets(spans)
    assert sorted(i for rows in buckets for i in rows) == list(range(len(spans)))
    for rows in buckets:
        assert len(rows) * max(spans[i] for i in rows) <= 2 * sum(spans[i] for i in rows)
    if 2 * min(spans) >= max(spans):
        assert len(buckets) == 1
    if spans[-1] == 9:  # two short rows ride along with twenty long ones
        assert len(buckets) == 1


class Batch:
    """Sequences of `seq_lens` whose last `q_lens` tokens are this step's, in a paged cache
    (shuffled blocks) and the same K/V in a contiguous one (gaps between sequences)."""

    def __init__(self, seed, seq_lens, q_lens, num_q_heads=8, num_kv_heads=2, head_dim=16,
                 block_size=4, cache="float32", latent_rank=None):
        gen = torch.Generator().manual_seed(seed)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32)
        self.query_start_loc = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()])
        self.block_size = block_size
        self.scale = head_dim**-0.5
        blocks_per_seq = [-(-n // block_size) for n in seq_lens]
        num_blocks = sum(blocks_per_seq) + 2
        order = torch.randperm(num_blocks, generator=gen).tolist()
        width = max(blocks_per_seq)
        tables, used = [], 0
        for count in blocks_per_seq:
            tables.append(order[used: used + count] + [order[-1]] * (width - count))
            used += count
        self.block_tables = torch.tensor(tables, dtype=torch.int32)
        shape = (num_blocks * block_size, num_kv_heads, head_dim)
        k, v = 50 * torch.randn(shape, generator=gen), 50 * torch.randn(shape, generator=gen)
        starts, at = [], 3
        for n in seq_lens:
            starts.append(at)
            at += n + 2
        self.start_slots = torch.tensor(starts, dtype=torch.int32)
        kc = 50 * torch.randn(at, num_kv_heads, head_dim, generator=gen)
        vc = 50 * torch.randn(at, num_kv_heads, head_dim, generator=gen)
        for i, n in enumerate(seq_lens):
            keys = torch.randn(n, num_kv_heads, head_dim, generator=gen)
            values = torch.randn(n, num_kv_heads, head_dim, generator=gen)
            paged = ref.paged_slots(self.block_tables[i], n, block_size)
            k[paged], v[paged] = keys, values
            kc[starts[i]: starts[i] + n], vc[starts[i]: starts[i] + n] = keys, values
        self.q = torch.randn(sum(q_lens), num_q_heads, head_dim, generator=gen)
        self.k_scale = self.v_scale = None
        if cache == "bfloat16":
            k, v, kc, vc = (t.bfloat16() for t in (k, v, kc, vc))
        elif cache.startswith("fp8"):
            per_head = cache == "fp8-per-head"
            self.k_scale = torch.tensor([0.01, 0.02] if per_head else 0.015)
            self.v_scale = torch.tensor([0.03, 0.005] if per_head else 0.02)
            k, kc = (ref.quantize_fp8(t, self.k_scale) for t in (k, kc))
            v, vc = (ref.quantize_fp8(t, self.v_scale) for t in (v, vc))
        if latent_rank is not None:  # one cache; the values are each row's first dims
            v, vc = k[..., :latent_rank], kc[..., :latent_rank]
        self.paged_kv, self.contiguous_kv = (k, v), (kc, vc)

    def attention(self, ops, layout: str, **variant) -> torch.Tensor:
        scales = (self.k_scale, self.v_scale)
        if layout == "paged":
            return ops.paged_attention(self.q, *self.paged_kv, self.block_tables,
                                       self.query_start_loc, self.seq_lens, self.block_size,
                                       self.scale, *scales, **variant)
        return ops.contiguous_attention(self.q, *self.contiguous_kv, self.start_slots,
                                        self.query_start_loc, self.seq_lens, self.scale,
                                        *scales, **variant)

    def decode(self, ops, layout: str, **variant) -> torch.Tensor:
        scales = (self.k_scale, self.v_scale)
        if layout == "paged":
            return ops.paged_decode_attention(self.q, *self.paged_kv, self.block_tables,
                                              self.seq_lens, self.block_size, self.scale,
                                              *scales, **variant)
        return ops.contiguous_decode_attention(self.q, *self.contiguous_kv, self.start_slots,
                                               self.seq_lens, self.scale, *scales, **variant)


# Ragged lengths: three buckets, padded rows in each, a lone token.
DECODE_LENS = [37, 1, 120, 9, 64, 33, 70, 2]
PREFILL = ([30, 9, 17, 1], [30, 4, 1, 1])  # a whole prompt, chunks after cached prefixes
VARIANTS = {
    "plain": {},
    "window": {"sliding_window": 6},
    "window-1": {"sliding_window": 1},
    "softcap": {"softcap": 2.5},
    "sinks": {"sinks": torch.linspace(-1.0, 2.0, 8)},
    "all": {"sliding_window": 11, "softcap": 3.0, "sinks": torch.linspace(1.0, -1.0, 8)},
}
CACHES = ["float32", "bfloat16", "fp8-scalar", "fp8-per-head"]


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_decode_equals_the_reference(layout, variant, cache):
    b = Batch(1, DECODE_LENS, [1] * len(DECODE_LENS), cache=cache)
    want = b.decode(ref, layout, **VARIANTS[variant])
    torch.testing.assert_close(b.decode(cpu, layout, **VARIANTS[variant]), want, **TOL)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_prefill_equals_the_reference(layout, variant, cache):
    b = Batch(2, *PREFILL, cache=cache)
    want = b.attention(ref, layout, **VARIANTS[variant])
    torch.testing.assert_close(b.attention(cpu, layout, **VARIANTS[variant]), want, **TOL)


@pytest.mark.parametrize("num_q_heads,num_kv_heads", [(4, 4), (4, 1), (6, 2)])
@pytest.mark.parametrize("lens", [[5] * 6, [16, 15, 9], [1]], ids=["equal", "ragged", "one"])
def test_decode_head_groups_and_batches_equal_the_reference(num_q_heads, num_kv_heads, lens):
    b = Batch(3, lens, [1] * len(lens), num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
              block_size=8)
    for layout in ("paged", "contiguous"):
        torch.testing.assert_close(b.decode(cpu, layout), b.decode(ref, layout), **TOL)


@pytest.mark.parametrize("cache", ["float32", "fp8-scalar"])
def test_latent_attention_equals_the_reference(cache):
    """V narrower than K, a view of it: outputs are `[..., Hq, latent]`."""
    decode = Batch(4, [20, 3, 41], [1, 1, 1], num_q_heads=4, num_kv_heads=1, head_dim=24,
                   cache=cache, latent_rank=16)
    prefill = Batch(5, *PREFILL, num_q_heads=4, num_kv_heads=1, head_dim=24, cache=cache,
                    latent_rank=16)
    for layout in ("paged", "contiguous"):
        got = decode.decode(cpu, layout)
        assert got.shape == (3, 4, 16)
        torch.testing.assert_close(got, decode.decode(ref, layout), **TOL)
        torch.testing.assert_close(prefill.attention(cpu, layout),
                                   prefill.attention(ref, layout), **TOL)


def test_outputs_take_the_query_dtype():
    b = Batch(6, DECODE_LENS, [1] * len(DECODE_LENS), cache="bfloat16")
    b.q = b.q.bfloat16()
    got = b.decode(cpu, "paged")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, b.decode(ref, "paged"), rtol=1e-2, atol=1e-2)


def test_an_empty_decode_batch():
    b = Batch(7, [4], [1])
    got = cpu.paged_decode_attention(b.q[:0], *b.paged_kv, b.block_tables[:0],
                                     b.seq_lens[:0], b.block_size, b.scale)
    assert got.shape == (0, 8, 16)


@pytest.mark.parametrize("variant", ["plain", "softcap", "sinks"])
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_a_sequence_of_no_keys_gives_zeros(layout, variant):
    b = Batch(10, [9, 0, 4], [1, 1, 1])
    got = b.decode(cpu, layout, **VARIANTS[variant])
    want = b.decode(ref, layout, **VARIANTS[variant])
    assert torch.equal(want[1], torch.zeros_like(want[1]))
    torch.testing.assert_close(got, want, **TOL)
