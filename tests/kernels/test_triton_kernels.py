"""Triton kernels (kvbench.kernels.triton_ops) against the PyTorch reference.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set below before
triton is imported), so shapes stay tiny: head_dim 16/32, contexts <= 70, a few sequences.
The `gpu`-marked test repeats the comparison at model-sized shapes on CUDA.

Tolerances (absolute / relative):
- float32: 1e-5 / 1e-4 (both sides compute in float32; only summation order differs);
- bfloat16: 2e-2 / 2e-2; float16: 5e-3 / 5e-3 (the output rounding, plus on a GPU the
  16-bit tl.dot operands, dominate);
- fp8 cache versus the reference on the same fp8 cache: the tolerance of q's dtype (the kernel
  dequantizes exactly the same values);
- fp8 cache versus the unquantized float32 reference: derived from e4m3's relative precision,
  2^-3 / 2 = 2^-4 (3 mantissa bits, round to nearest): see `fp8_attention_bound`.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first import of triton

pytest.importorskip("triton")

from kvbench.kernels import reference as ref  # noqa: E402
from kvbench.kernels import triton_ops as tri  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

FP32_TOL = dict(rtol=1e-4, atol=1e-5)
BF16_TOL = dict(rtol=2e-2, atol=2e-2)
FP16_TOL = dict(rtol=5e-3, atol=5e-3)
TOL = {torch.float32: FP32_TOL, torch.bfloat16: BF16_TOL, torch.float16: FP16_TOL}

E4M3_REL = 2.0**-4  # half an ulp of a 3-bit mantissa, relative
E4M3_SUBNORMAL_ABS = 2.0**-10  # half the subnormal spacing 2^-9, times the scale


# ----------------------------------------------------------------------------------------------
# Random batches


def ragged_lengths(gen, num_seqs, block_size, max_len):
    """Lengths ending exactly on a block boundary, just after one, and random, all <= max_len."""
    full_blocks = max(1, max_len // block_size)
    k = int(torch.randint(1, full_blocks + 1, (1,), generator=gen))
    on_boundary = k * block_size
    just_after = min(max_len, (int(torch.randint(0, full_blocks, (1,), generator=gen)) * block_size) + 1)
    lens = [on_boundary, just_after]
    lens += torch.randint(1, max_len + 1, (max(0, num_seqs - 2),), generator=gen).tolist()
    return torch.tensor(lens[:num_seqs], dtype=torch.int32)


class Batch:
    """K/V for `seq_lens` in a paged cache (shuffled, non-contiguous block tables) and the same
    values in a contiguous cache (sequences at scattered start slots, gaps between them)."""

    def __init__(self, seed, *, num_q_heads, num_kv_heads, head_dim, block_size, seq_lens,
                 q_lens=None, dtype=torch.float32, cache_dtype=None, k_scale=None, v_scale=None):
        gen = torch.Generator().manual_seed(seed)
        cache_dtype = cache_dtype or dtype
        self.seq_lens = seq_lens.to(torch.int32)
        num_seqs = len(seq_lens)
        self.block_size = block_size
        self.num_q_heads, self.num_kv_heads, self.head_dim = num_q_heads, num_kv_heads, head_dim
        self.softmax_scale = head_dim**-0.5
        self.k_scale, self.v_scale = k_scale, v_scale
        max_blocks = max(1, -(-int(seq_lens.max()) // block_size))
        num_blocks = num_seqs * max_blocks + 2
        perm = torch.randperm(num_blocks, generator=gen)
        self.block_tables = perm[: num_seqs * max_blocks].reshape(num_seqs, max_blocks).to(torch.int32)
        num_slots = num_blocks * block_size
        self.k_full = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen)
        self.v_full = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen)
        starts, pos = [], 3
        for n in seq_lens.tolist():
            starts.append(pos)
            pos += n + 2
        self.start_slots = torch.tensor(starts, dtype=torch.int64)
        kc_full = torch.zeros(pos, num_kv_heads, head_dim)
        vc_full = torch.zeros(pos, num_kv_heads, head_dim)
        for i, n in enumerate(seq_lens.tolist()):
            src = ref.paged_slots(self.block_tables[i], n, block_size)
            dst = torch.arange(starts[i], starts[i] + n)
            kc_full[dst] = self.k_full[src]
            vc_full[dst] = self.v_full[src]
        self.kc_full, self.vc_full = kc_full, vc_full
        self.k_cache = self._cast(self.k_full, cache_dtype, k_scale)
        self.v_cache = self._cast(self.v_full, cache_dtype, v_scale)
        self.kc = self._cast(kc_full, cache_dtype, k_scale)
        self.vc = self._cast(vc_full, cache_dtype, v_scale)
        if q_lens is None:  # decode
            self.q = torch.randn(num_seqs, num_q_heads, head_dim, generator=gen).to(dtype)
            self.query_start_loc = None
        else:
            self.query_start_loc = torch.zeros(num_seqs + 1, dtype=torch.int32)
            self.query_start_loc[1:] = torch.cumsum(q_lens, 0)
            self.q = torch.randn(int(q_lens.sum()), num_q_heads, head_dim, generator=gen).to(dtype)
        self.to(DEVICE)

    @staticmethod
    def _cast(x, dtype, scale):
        return ref.quantize_fp8(x, scale) if dtype == ref.FP8_DTYPE else x.to(dtype)

    def to(self, device):
        for name, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(self, name, value.to(device))
        for name in ("k_scale", "v_scale"):
            if isinstance(getattr(self, name), torch.Tensor):
                setattr(self, name, getattr(self, name).to(device))

    # Calls on either module (reference or triton_ops), with optional keyword extras.
    def paged_decode(self, ops, k=None, v=None, **kw):
        return ops.paged_decode_attention(
            self.q, self.k_cache if k is None else k, self.v_cache if v is None else v,
            self.block_tables, self.seq_lens, self.block_size, self.softmax_scale,
            self.k_scale, self.v_scale, **kw)

    def contiguous_decode(self, ops, k=None, v=None, **kw):
        return ops.contiguous_decode_attention(
            self.q, self.kc if k is None else k, self.vc if v is None else v, self.start_slots,
            self.seq_lens, self.softmax_scale, self.k_scale, self.v_scale, **kw)

    def paged_prefill(self, ops, **kw):
        return ops.paged_attention(
            self.q, self.k_cache, self.v_cache, self.block_tables, self.query_start_loc,
            self.seq_lens, self.block_size, self.softmax_scale, self.k_scale, self.v_scale, **kw)

    def contiguous_prefill(self, ops, **kw):
        return ops.contiguous_attention(
            self.q, self.kc, self.vc, self.start_slots, self.query_start_loc, self.seq_lens,
            self.softmax_scale, self.k_scale, self.v_scale, **kw)


def assert_close(got, want, dtype):
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


# (query heads per KV head, KV heads, head_dim, block_size): GQA 1/4/8, block sizes 1..32.
CASES = [
    pytest.param(1, 2, 16, 8, id="gqa1-d16-bs8"),
    pytest.param(4, 2, 32, 16, id="gqa4-d32-bs16"),
    pytest.param(8, 1, 16, 32, id="gqa8-d16-bs32"),
    pytest.param(4, 1, 32, 1, id="gqa4-d32-bs1"),
    pytest.param(2, 1, 24, 4, id="gqa2-d24-bs4"),  # head_dim not a power of two (masked)
]
MAX_LEN = 70


def decode_batch(seed, group, num_kv_heads, head_dim, block_size, num_seqs=3, **kw):
    gen = torch.Generator().manual_seed(1000 + seed)
    lens = ragged_lengths(gen, num_seqs, block_size, MAX_LEN)
    return Batch(seed, num_q_heads=group * num_kv_heads, num_kv_heads=num_kv_heads,
                 head_dim=head_dim, block_size=block_size, seq_lens=lens, **kw)


def prefill_batch(seed, group, num_kv_heads, head_dim, block_size, **kw):
    """Four sequences: a full prefill, a chunk after a cached prefix, one new token after a
    prefix, and one with no new tokens (q_len 0)."""
    gen = torch.Generator().manual_seed(2000 + seed)
    lens = ragged_lengths(gen, 4, block_size, MAX_LEN)
    q_lens = torch.stack([
        lens[0],
        torch.clamp(lens[1] - 1, min=1),
        torch.tensor(1, dtype=lens.dtype),
        torch.tensor(0, dtype=lens.dtype),
    ])
    q_lens = torch.minimum(q_lens, lens)
    return Batch(seed, num_q_heads=group * num_kv_heads, num_kv_heads=num_kv_heads,
                 head_dim=head_dim, block_size=block_size, seq_lens=lens, q_lens=q_lens, **kw)


# ----------------------------------------------------------------------------------------------
# Decode


@pytest.mark.parametrize("num_splits", [1, 3], ids=["split1", "split3"])
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
@pytest.mark.parametrize("group,num_kv_heads,head_dim,block_size", CASES)
def test_decode_matches_reference(group, num_kv_heads, head_dim, block_size, layout, num_splits):
    b = decode_batch(block_size + group, group, num_kv_heads, head_dim, block_size)
    call = b.paged_decode if layout == "paged" else b.contiguous_decode
    assert_close(call(tri, num_splits=num_splits), call(ref), torch.float32)


def test_paged_equals_contiguous_on_same_data():
    b = decode_batch(5, 4, 2, 32, 8)
    paged = b.paged_decode(tri, num_splits=1)
    torch.testing.assert_close(paged, b.contiguous_decode(tri, num_splits=1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(paged, b.paged_decode(tri, num_splits=2), **FP32_TOL)
    p = prefill_batch(5, 4, 2, 32, 8)
    torch.testing.assert_close(p.paged_prefill(tri), p.contiguous_prefill(tri), rtol=1e-6, atol=1e-6)


def test_decode_more_splits_than_tiles():
    """Splits past a short sequence's end are empty and must not disturb the merge."""
    b = Batch(3, num_q_heads=4, num_kv_heads=2, head_dim=16, block_size=8,
              seq_lens=torch.tensor([5, 70, 17, 1]))
    assert_close(b.paged_decode(tri, num_splits=8), b.paged_decode(ref), torch.float32)
    assert_close(b.contiguous_decode(tri, num_splits=8, block_n=32), b.contiguous_decode(ref),
                 torch.float32)


def test_decode_auto_split_choice():
    cpu = torch.device("cpu")
    assert tri.choose_num_splits(4, 8, 100, cpu) == 1  # short context: never split
    assert tri.choose_num_splits(1, 1, 64 * 1024, cpu) > 1  # one long sequence: split
    assert tri.choose_num_splits(512, 8, 64 * 1024, cpu) == 1  # the grid is already full
    many = tri.choose_num_splits(1, 1, 10**7, cpu)
    assert 1 < many <= tri.SPLIT_MAX
    # A few split counts in all, so decode CUDA graphs keyed by them stay few; never fewer
    # than SPLIT_MIN_TOKENS tokens per split.
    h200 = tri.Target(arch=90, sms=132)
    chosen = {(s, n, tri.choose_num_splits(s, 8, n, h200))
              for s in range(1, 70) for n in range(400, 40000, 97)}
    assert {k for _, _, k in chosen} == set(tri.SPLIT_COUNTS)
    assert all(k == 1 or n // k >= tri.SPLIT_MIN_TOKENS for _, n, k in chosen)
    b = decode_batch(1, 4, 2, 16, 16)
    assert_close(b.paged_decode(tri), b.paged_decode(ref), torch.float32)  # num_splits=None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_16bit(dtype):
    b = decode_batch(7, 4, 2, 32, 16, dtype=dtype)
    assert_close(b.paged_decode(tri, num_splits=2), b.paged_decode(ref), dtype)
    assert_close(b.contiguous_decode(tri, num_splits=1), b.contiguous_decode(ref), dtype)


def test_decode_strided_inputs():
    """q sliced out of a fused qkv tensor, caches that are views of a [slots, 2, H, D] arena."""
    b = decode_batch(9, 4, 2, 16, 8)
    num_slots = b.k_cache.shape[0]
    arena = torch.stack([b.k_cache, b.v_cache], dim=1)  # [slots, 2, Hkv, D]
    k_view, v_view = arena[:, 0], arena[:, 1]
    assert not k_view.is_contiguous() and k_view.shape[0] == num_slots
    qkv = torch.randn(b.q.shape[0], b.num_q_heads + 2 * b.num_kv_heads, b.head_dim, device=DEVICE)
    qkv[:, : b.num_q_heads] = b.q
    b.q = qkv[:, : b.num_q_heads]
    assert not b.q.is_contiguous()
    got = b.paged_decode(tri, k=k_view, v=v_view, num_splits=2)
    assert_close(got, b.paged_decode(ref), torch.float32)


def test_decode_empty_sequence_gives_zeros():
    b = Batch(1, num_q_heads=2, num_kv_heads=1, head_dim=16, block_size=8,
              seq_lens=torch.tensor([9, 0]))
    for splits in (1, 2):
        out = b.paged_decode(tri, num_splits=splits)
        assert torch.equal(out[1], torch.zeros_like(out[1]))
        assert_close(out[:1], b.paged_decode(ref)[:1], torch.float32)


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes(seed):
    """Everything drawn at random (seeded): GQA ratio, heads, head_dim, block size, batch,
    lengths, split count, tile width; decode and prefill, both layouts."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    group, num_kv_heads = pick([1, 4, 8]), pick([1, 2])
    head_dim, block_size = pick([16, 32]), pick([1, 2, 4, 8, 16, 32])
    num_seqs = int(torch.randint(1, 5, (1,), generator=gen))
    lens = ragged_lengths(gen, num_seqs, block_size, MAX_LEN)
    shape = dict(num_q_heads=group * num_kv_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                 block_size=block_size, seq_lens=lens)
    b = Batch(seed, **shape)
    splits, block_n = pick([1, 2, 4]), pick([16, 32])
    assert_close(b.paged_decode(tri, num_splits=splits, block_n=block_n), b.paged_decode(ref),
                 torch.float32)
    assert_close(b.contiguous_decode(tri, num_splits=splits, block_n=block_n),
                 b.contiguous_decode(ref), torch.float32)
    q_lens = torch.minimum(lens, torch.randint(0, MAX_LEN + 1, (num_seqs,), generator=gen))
    p = Batch(seed, q_lens=q_lens, **shape)
    assert_close(p.paged_prefill(tri), p.paged_prefill(ref), torch.float32)
    assert_close(p.contiguous_prefill(tri), p.contiguous_prefill(ref), torch.float32)


# ----------------------------------------------------------------------------------------------
# Prefill


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
@pytest.mark.parametrize("group,num_kv_heads,head_dim,block_size", CASES)
def test_prefill_matches_reference(group, num_kv_heads, head_dim, block_size, layout):
    b = prefill_batch(block_size * group, group, num_kv_heads, head_dim, block_size)
    call = b.paged_prefill if layout == "paged" else b.contiguous_prefill
    assert_close(call(tri), call(ref), torch.float32)


def test_prefill_tile_shapes():
    """Other tile sizes; max_query_len given (no device sync)."""
    b = prefill_batch(4, 2, 2, 16, 16)
    want = b.paged_prefill(ref)
    max_q = int((b.query_start_loc[1:] - b.query_start_loc[:-1]).max())
    assert_close(b.paged_prefill(tri, block_m=32, block_n=32, max_query_len=max_q), want,
                 torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_prefill_16bit(dtype):
    b = prefill_batch(8, 4, 2, 32, 16, dtype=dtype)
    assert_close(b.paged_prefill(tri), b.paged_prefill(ref), dtype)


def test_decode_equals_prefill_with_q_len_1():
    b = decode_batch(6, 8, 1, 16, 8)
    b.query_start_loc = torch.arange(b.q.shape[0] + 1, dtype=torch.int32, device=DEVICE)
    torch.testing.assert_close(b.paged_decode(tri, num_splits=1), b.paged_prefill(tri), **FP32_TOL)


# ----------------------------------------------------------------------------------------------
# Score variants: sliding window, soft cap, sinks (reference.py's semantics)


VARIANTS = [
    pytest.param(dict(sliding_window=5), id="window5"),
    pytest.param(dict(sliding_window=1), id="window1"),
    pytest.param(dict(sliding_window=40), id="window40"),  # more than one tile
    pytest.param(dict(softcap=2.0), id="softcap"),
    pytest.param(dict(sinks=True), id="sinks"),
    pytest.param(dict(sliding_window=7, softcap=3.0, sinks=True), id="all"),
]


def variant_kwargs(kw, num_q_heads):
    kw = dict(kw)
    if kw.pop("sinks", False):
        kw["sinks"] = torch.linspace(-1.0, 3.0, num_q_heads, device=DEVICE)
    return kw


def poison_before_window(b, window):
    """What a strategy that frees the blocks behind a window leaves: every paged table entry
    wholly before a sequence's window points at one block of NaN K/V, and the contiguous
    slots before it hold NaN. A kernel that reads any of them gives NaN."""
    bs = b.block_size
    poison = sorted(set(range(b.k_cache.shape[0] // bs)) - set(b.block_tables.flatten().tolist()))[0]
    for cache in (b.k_cache, b.v_cache):
        cache[poison * bs:(poison + 1) * bs] = float("nan")
    q_lens = ([1] * len(b.seq_lens) if b.query_start_loc is None
              else (b.query_start_loc[1:] - b.query_start_loc[:-1]).tolist())
    for i, n in enumerate(b.seq_lens.tolist()):
        first = ref.first_visible(n, q_lens[i], window)
        b.block_tables[i, : first // bs] = poison
        start = int(b.start_slots[i])
        b.kc[start:start + first] = float("nan")
        b.vc[start:start + first] = float("nan")


@pytest.mark.parametrize("num_splits", [1, 3], ids=["split1", "split3"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_decode_variants_match_reference(variant, num_splits):
    b = decode_batch(41, 4, 2, 16, 4, num_seqs=4)
    kw = variant_kwargs(variant, b.num_q_heads)
    if "sliding_window" in kw:
        poison_before_window(b, kw["sliding_window"])
    for call in (b.paged_decode, b.contiguous_decode):
        got = call(tri, num_splits=num_splits, **kw)
        assert torch.isfinite(got).all()
        assert_close(got, call(ref, **kw), torch.float32)


@pytest.mark.parametrize("variant", VARIANTS)
def test_prefill_variants_match_reference(variant):
    b = prefill_batch(42, 2, 2, 16, 4)
    kw = variant_kwargs(variant, b.num_q_heads)
    if "sliding_window" in kw:
        poison_before_window(b, kw["sliding_window"])
    for call in (b.paged_prefill, b.contiguous_prefill):
        got = call(tri, **kw)
        assert torch.isfinite(got).all()
        assert_close(got, call(ref, **kw), torch.float32)


def test_variants_change_the_result():
    """Each variant is applied (not silently ignored): it moves the output of a plain call."""
    b = decode_batch(43, 2, 1, 16, 8)
    plain = b.paged_decode(tri, num_splits=1)
    for kw in (dict(sliding_window=3), dict(softcap=0.5), dict(sinks=True)):
        got = b.paged_decode(tri, num_splits=2, **variant_kwargs(kw, b.num_q_heads))
        assert not torch.allclose(got, plain, atol=1e-3), kw


@pytest.mark.filterwarnings("ignore:overflow encountered in exp2")  # e^(2x) = inf: tanh = 1
def test_softcap_saturates_like_tanh():
    """Scores far beyond the cap (tanh at +-1) and a window longer than every context."""
    b = decode_batch(44, 4, 1, 32, 8)
    b.q = b.q * 30
    p = prefill_batch(44, 4, 1, 32, 8)
    p.q = p.q * 30
    kw = dict(softcap=1.5, sliding_window=1000)
    assert_close(b.paged_decode(tri, num_splits=2, **kw), b.paged_decode(ref, **kw),
                 torch.float32)
    assert_close(p.paged_prefill(tri, **kw), p.paged_prefill(ref, **kw), torch.float32)


def test_sinks_on_an_empty_sequence_give_zeros():
    b = Batch(1, num_q_heads=2, num_kv_heads=1, head_dim=16, block_size=8,
              seq_lens=torch.tensor([9, 0]))
    sinks = torch.tensor([0.5, -2.0], device=DEVICE)
    for splits in (1, 2):
        out = b.paged_decode(tri, num_splits=splits, sinks=sinks)
        assert torch.equal(out[1], torch.zeros_like(out[1]))
        assert_close(out[:1], b.paged_decode(ref, sinks=sinks)[:1], torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_variants_16bit(dtype):
    kw = dict(sliding_window=9, softcap=4.0)
    b = decode_batch(45, 4, 2, 32, 16, dtype=dtype)
    kw = variant_kwargs(dict(kw, sinks=True), b.num_q_heads)
    assert_close(b.paged_decode(tri, num_splits=2, **kw), b.paged_decode(ref, **kw), dtype)
    p = prefill_batch(45, 4, 2, 32, 16, dtype=dtype)
    assert_close(p.paged_prefill(tri, **kw), p.paged_prefill(ref, **kw), dtype)


def test_variants_with_fp8_cache():
    kw = dict(dtype=torch.bfloat16, cache_dtype=ref.FP8_DTYPE, k_scale=0.02,
              v_scale=torch.tensor([0.012, 0.03]))
    b = decode_batch(46, 4, 2, 32, 16, **kw)
    var = variant_kwargs(dict(sliding_window=20, softcap=5.0, sinks=True), b.num_q_heads)
    assert_close(b.paged_decode(tri, num_splits=3, **var), b.paged_decode(ref, **var),
                 torch.bfloat16)
    p = prefill_batch(46, 4, 2, 32, 16, **kw)
    assert_close(p.contiguous_prefill(tri, **var), p.contiguous_prefill(ref, **var),
                 torch.bfloat16)


def test_window_splits_only_its_span():
    """With a window the auto split count looks at the window, not the context: a 4096-token
    context behind a 256-token window is never split."""
    b = Batch(2, num_q_heads=2, num_kv_heads=1, head_dim=16, block_size=16,
              seq_lens=torch.tensor([600]))
    target = tri.Target(arch=90, sms=132)
    assert tri.choose_num_splits(1, 1, 4096, target) > 1
    _, launches = tri.decode_launches(b.q, b.k_cache, b.v_cache, b.block_tables, True,
                                      b.seq_lens, 16, 0.25, max_seq_len=4096, target=target,
                                      sliding_window=256)
    assert [launch.constexprs["SPLIT"] for launch in launches] == [False]


def test_variant_arguments_are_checked():
    b = decode_batch(47, 2, 1, 16, 8)
    with pytest.raises(ValueError, match="sinks"):
        b.paged_decode(tri, sinks=torch.zeros(3, device=DEVICE))
    with pytest.raises(ValueError, match="sliding_window"):
        b.paged_decode(tri, sliding_window=0)
    with pytest.raises(ValueError, match="softcap"):
        b.paged_decode(tri, softcap=0.0)


# ----------------------------------------------------------------------------------------------
# Latent attention (MLA) decode: one cache row [latent | rope key], values = the latent


class LatentBatch:
    """A DeepSeek-style latent cache `[slots, 1, lora + rope]` (paged, shuffled tables, and the
    same rows at scattered contiguous start slots) and absorbed queries `[S, H, lora + rope]`."""

    def __init__(self, seed, *, num_heads, lora_dim, rope_dim, block_size, seq_lens,
                 dtype=torch.float32, cache_dtype=None, scale=None):
        gen = torch.Generator().manual_seed(seed)
        self.seq_lens, self.block_size, self.lora_dim = seq_lens.to(torch.int32), block_size, lora_dim
        self.scale = scale
        self.softmax_scale = (128 + rope_dim) ** -0.5  # DeepSeek's qk_nope + qk_rope head dim
        width = lora_dim + rope_dim
        num_seqs = len(seq_lens)
        max_blocks = max(1, -(-int(seq_lens.max()) // block_size))
        num_blocks = num_seqs * max_blocks + 1
        self.block_tables = torch.randperm(num_blocks, generator=gen)[: num_seqs * max_blocks] \
            .reshape(num_seqs, max_blocks).to(torch.int32)
        rows = torch.randn(num_blocks * block_size, 1, width, generator=gen)
        starts, pos = [], 2
        for n in seq_lens.tolist():
            starts.append(pos)
            pos += n + 3
        self.start_slots = torch.tensor(starts)
        contiguous = torch.zeros(pos, 1, width)
        for i, n in enumerate(seq_lens.tolist()):
            contiguous[starts[i]:starts[i] + n] = rows[ref.paged_slots(self.block_tables[i], n,
                                                                        block_size)]
        cast = (lambda x: ref.quantize_fp8(x, scale)) if cache_dtype == ref.FP8_DTYPE \
            else (lambda x: x.to(cache_dtype or dtype))
        self.cache, self.contiguous = cast(rows), cast(contiguous)
        self.q = torch.randn(num_seqs, num_heads, width, generator=gen).to(dtype)
        for name in ("seq_lens", "block_tables", "start_slots", "cache", "contiguous", "q"):
            setattr(self, name, getattr(self, name).to(DEVICE))

    def paged(self, ops, **kw):
        return ops.paged_decode_attention(
            self.q, self.cache, self.cache[..., :self.lora_dim], self.block_tables, self.seq_lens,
            self.block_size, self.softmax_scale, self.scale, self.scale, **kw)

    def contiguous_decode(self, ops, **kw):
        return ops.contiguous_decode_attention(
            self.q, self.contiguous, self.contiguous[..., :self.lora_dim], self.start_slots,
            self.seq_lens, self.softmax_scale, self.scale, self.scale, **kw)


@pytest.mark.parametrize("num_splits", [1, 3], ids=["split1", "split3"])
@pytest.mark.parametrize("num_heads", [4, 20], ids=["h4", "h20"])  # 20: two head blocks, masked
def test_mla_decode_matches_reference(num_heads, num_splits):
    b = LatentBatch(51, num_heads=num_heads, lora_dim=64, rope_dim=16, block_size=8,
                    seq_lens=torch.tensor([17, 40, 1, 0]))
    for call in (b.paged, b.contiguous_decode):
        got = call(tri, num_splits=num_splits)
        assert got.shape == (4, num_heads, 64)
        assert_close(got, call(ref), torch.float32)
    assert torch.equal(got[3], torch.zeros_like(got[3]))  # empty sequence


def test_mla_decode_deepseek_v3_widths():
    """512 latent + 64 rope dims (576: not a power of two), 16 heads (DeepSeek-V3 at TP 8)."""
    b = LatentBatch(52, num_heads=16, lora_dim=512, rope_dim=64, block_size=16,
                    seq_lens=torch.tensor([33, 5]), dtype=torch.bfloat16)
    assert_close(b.paged(tri, num_splits=2), b.paged(ref), torch.bfloat16)
    assert_close(b.contiguous_decode(tri, num_splits=1), b.contiguous_decode(ref), torch.bfloat16)


def test_mla_decode_fp8_cache():
    b = LatentBatch(53, num_heads=8, lora_dim=32, rope_dim=16, block_size=4,
                    seq_lens=torch.tensor([21, 9]), dtype=torch.bfloat16,
                    cache_dtype=ref.FP8_DTYPE, scale=0.03)
    assert_close(b.paged(tri, num_splits=2), b.paged(ref), torch.bfloat16)
    assert_close(b.contiguous_decode(tri, num_splits=1), b.contiguous_decode(ref), torch.bfloat16)


def test_mla_write_kv_writes_the_latent_row():
    """`write_kv(k, k[..., :lora], cache, cache[..., :lora])`: bit-exact against the reference
    (the values are the key rows' latent part), fp8 included."""
    x = torch.randn(5, 1, 48, device=DEVICE) * 3
    slots = torch.tensor([4, 0, -1, 9, 2], device=DEVICE)
    kept = slots[slots >= 0]
    for cache_dtype, scale in ((torch.float32, None), (ref.FP8_DTYPE, 0.05)):
        got, want = (torch.zeros(12, 1, 48, device=DEVICE).to(cache_dtype) for _ in range(2))
        tri.write_kv(x, x[..., :32], got, got[..., :32], slots, scale, scale)
        ref.write_kv(x[slots >= 0], x[slots >= 0][..., :32], want, want[..., :32], kept, scale,
                     scale)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_mla_refusals():
    b = LatentBatch(54, num_heads=4, lora_dim=32, rope_dim=16, block_size=4,
                    seq_lens=torch.tensor([5]))
    copy = b.cache[..., :32].clone()  # not a view of the key cache: values would be stale
    with pytest.raises(ValueError, match="view"):
        tri.paged_decode_attention(b.q, b.cache, copy, b.block_tables, b.seq_lens, 4, 0.1)
    with pytest.raises(NotImplementedError, match="sliding_window"):
        b.paged(tri, sliding_window=4)
    qsl = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    with pytest.raises(NotImplementedError, match="latent"):
        tri.paged_attention(b.q, b.cache, b.cache[..., :32], b.block_tables, qsl, b.seq_lens, 4,
                            0.1)


# ----------------------------------------------------------------------------------------------
# fp8 caches


SCALES = {
    "scalar": (0.02, 0.015),
    "per_head": (torch.tensor([0.02, 0.01]), torch.tensor([0.012, 0.03])),
}


@pytest.mark.parametrize("q_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale_kind", list(SCALES))
def test_fp8_matches_reference_on_same_cache(scale_kind, q_dtype):
    k_scale, v_scale = SCALES[scale_kind]
    kw = dict(dtype=q_dtype, cache_dtype=ref.FP8_DTYPE, k_scale=k_scale, v_scale=v_scale)
    b = decode_batch(21, 4, 2, 32, 16, **kw)
    assert_close(b.paged_decode(tri, num_splits=2), b.paged_decode(ref), q_dtype)
    assert_close(b.contiguous_decode(tri, num_splits=1), b.contiguous_decode(ref), q_dtype)
    p = prefill_batch(22, 4, 2, 32, 16, **kw)
    assert_close(p.paged_prefill(tri), p.paged_prefill(ref), q_dtype)


def fp8_attention_bound(q, k, v, softmax_scale, k_scale, v_scale, group):
    """Worst-case |attention over fp8 K/V - attention over exact K/V| for one decode query.

    `q` `[Hq, D]`, `k`/`v` `[L, Hkv, D]` (exact values). A stored value is within
    err(x) = 2^-4 |x| + 2^-10 scale of x (e4m3: relative precision 2^-3 / 2 for normals, half
    the 2^-9 spacing for subnormals). A score moves by at most
    d = softmax_scale * sum_d |q_d| err(k_d); the softmax weights then move by a total variation
    of at most exp(2 max d) - 1, so the output moves by at most
    (exp(2 max d) - 1) max|v| + max err(v). Returns `[Hq]`.
    """
    num_kv_heads = k.shape[1]
    ks = torch.as_tensor(k_scale, dtype=torch.float32).reshape(-1).expand(num_kv_heads)
    vs = torch.as_tensor(v_scale, dtype=torch.float32).reshape(-1).expand(num_kv_heads)
    k_err = E4M3_REL * k.abs() + E4M3_SUBNORMAL_ABS * ks.cpu()[None, :, None]
    v_err = E4M3_REL * v.abs() + E4M3_SUBNORMAL_ABS * vs.cpu()[None, :, None]
    k_err = k_err.repeat_interleave(group, dim=1)  # [L, Hq, D]
    shift = softmax_scale * torch.einsum("hd,lhd->hl", q.abs(), k_err).amax(-1)
    v_max = v.abs().repeat_interleave(group, dim=1).amax(dim=(0, 2))
    v_err_max = v_err.repeat_interleave(group, dim=1).amax(dim=(0, 2))
    return (torch.exp(2 * shift) - 1) * v_max + v_err_max


@pytest.mark.parametrize("scale_kind", list(SCALES))
def test_fp8_against_unquantized_reference(scale_kind):
    k_scale, v_scale = SCALES[scale_kind]
    b = decode_batch(31, 4, 2, 32, 16, cache_dtype=ref.FP8_DTYPE, k_scale=k_scale, v_scale=v_scale)
    got = b.paged_decode(tri, num_splits=2).cpu()
    exact = ref.paged_decode_attention(b.q, b.k_full, b.v_full, b.block_tables, b.seq_lens,
                                       b.block_size, b.softmax_scale).cpu()
    err = (got - exact).abs().amax(-1)  # [S, Hq]
    q = b.q.cpu()
    for i, n in enumerate(b.seq_lens.tolist()):
        slots = ref.paged_slots(b.block_tables[i].cpu(), n, b.block_size)
        bound = fp8_attention_bound(q[i], b.k_full.cpu()[slots], b.v_full.cpu()[slots],
                                    b.softmax_scale, k_scale, v_scale, group=4)
        assert (err[i] <= bound).all()
    # The worst case above is loose; in practice the error stays well under 2^-4 * max|v|.
    assert err.max() < E4M3_REL * b.v_full.abs().max().cpu()


# ----------------------------------------------------------------------------------------------
# KV write


@pytest.mark.parametrize(
    "src_dtype,cache_dtype,scales",
    [
        pytest.param(torch.float32, torch.float32, None, id="fp32"),
        pytest.param(torch.float32, torch.bfloat16, None, id="fp32-to-bf16"),
        pytest.param(torch.bfloat16, torch.bfloat16, None, id="bf16"),
        pytest.param(torch.float16, torch.bfloat16, None, id="fp16-to-bf16"),
        pytest.param(torch.bfloat16, ref.FP8_DTYPE, "scalar", id="fp8-scalar"),
        pytest.param(torch.float32, ref.FP8_DTYPE, "per_head", id="fp8-per-head"),
    ],
)
def test_write_kv_matches_reference(src_dtype, cache_dtype, scales):
    gen = torch.Generator().manual_seed(11)
    num_tokens, num_kv_heads, head_dim, num_slots = 13, 2, 32, 40
    k = (torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen) * 4).to(src_dtype)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(src_dtype)
    slots = torch.randperm(num_slots, generator=gen)[:num_tokens]
    k_scale, v_scale = SCALES[scales] if scales else (None, None)
    caches = []
    for _ in range(2):
        fill = torch.randn(num_slots, num_kv_heads, head_dim, generator=torch.Generator().manual_seed(0))
        caches.append([fill.to(cache_dtype).to(DEVICE), fill.to(cache_dtype).to(DEVICE)])
    args = (k.to(DEVICE), v.to(DEVICE))
    dev_slots = slots.to(DEVICE)
    tri.write_kv(*args, *caches[0], dev_slots.to(torch.int32), k_scale, v_scale)
    ref.write_kv(*args, *caches[1], dev_slots, k_scale, v_scale)
    for got, want in zip(caches[0], caches[1], strict=True):
        if cache_dtype == ref.FP8_DTYPE:
            got, want = got.view(torch.uint8), want.view(torch.uint8)
        assert torch.equal(got, want)


def test_write_kv_skips_negative_slots():
    k = torch.randn(3, 1, 16, device=DEVICE)
    k_cache = torch.zeros(4, 1, 16, device=DEVICE)
    v_cache = torch.zeros(4, 1, 16, device=DEVICE)
    tri.write_kv(k, k, k_cache, v_cache, torch.tensor([2, -1, 0], device=DEVICE))
    assert torch.equal(k_cache[2], k[0]) and torch.equal(k_cache[0], k[2])
    assert not k_cache[[1, 3]].any() and not v_cache[[1, 3]].any()


def test_fp8_write_rounding_edge_cases():
    """Ties between adjacent e4m3 values (round half to even), values around the largest
    finite value (saturation), subnormals, signed zeros and infinities: bit-exact vs torch."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # all finite non-negative e4m3 values
    values = codes.view(ref.FP8_DTYPE).float()
    ties = (values[:-1] + values[1:]) / 2
    nudged = torch.cat([ties * (1 + 2**-20), ties * (1 - 2**-20)])
    specials = torch.tensor([0.0, -0.0, 448.0, 449.0, 463.9, 464.0, 500.0, 1e30, float("inf"),
                             2.0**-9, 2.0**-10, 3 * 2.0**-11, 2.0**-6 - 2.0**-12, 1e-30, -127.99])
    x = torch.cat([values, ties, nudged, specials])
    x = torch.cat([x, -x])
    x = torch.cat([x, torch.zeros(-x.numel() % 16)]).reshape(-1, 1, 16)  # 16 values per token
    num = x.shape[0]
    for scale in (1.0, 0.37):
        caches = [torch.zeros(num, 1, 16, dtype=ref.FP8_DTYPE, device=DEVICE) for _ in range(4)]
        slots = torch.arange(num, device=DEVICE)
        tri.write_kv(x.to(DEVICE), x.to(DEVICE), caches[0], caches[1], slots, scale, scale)
        ref.write_kv(x.to(DEVICE), x.to(DEVICE), caches[2], caches[3], slots, scale, scale)
        assert torch.equal(caches[0].view(torch.uint8), caches[2].view(torch.uint8))


# ----------------------------------------------------------------------------------------------
# Rows wider than one q @ k.T chunk (32 columns under the interpreter; on a GPU, float32 rows
# past 128 columns): 64 and 128 are whole chunks, 80 pads to a partly and a wholly masked one,
# 256 is Gemma-2/3's and Qwen3-Next's head size.

CHUNKED_LENS = dict(lens=torch.tensor([16, 17, 40, 1]), q_lens=torch.tensor([16, 9, 21, 1]))


@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
def test_chunked_rows_match_reference(head_dim):
    check_all_kernels(torch.float32, num_q_heads=4, num_kv_heads=2, head_dim=head_dim,
                      block_size=16, write_tokens=8, splits=(1, 3), **CHUNKED_LENS)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_head_dim_256_16bit(dtype):
    """Decode (split and not, both layouts), prefill, fp8 caches and the KV write; eight query
    heads per KV head, as Qwen3-Next's 16 over 2."""
    check_all_kernels(dtype, num_q_heads=8, num_kv_heads=1, head_dim=256, block_size=16,
                      write_tokens=8, splits=(1, 3), **CHUNKED_LENS)


def test_head_dim_256_float32_queries_on_an_fp8_cache():
    kw = dict(num_q_heads=4, num_kv_heads=2, head_dim=256, block_size=16, dtype=torch.float32,
              cache_dtype=ref.FP8_DTYPE, k_scale=0.02, v_scale=torch.tensor([0.012, 0.03]),
              seq_lens=CHUNKED_LENS["lens"])
    b = Batch(6, **kw)
    for num_splits in (1, 3):
        assert_close(b.paged_decode(tri, num_splits=num_splits), b.paged_decode(ref),
                     torch.float32)
    p = Batch(7, q_lens=CHUNKED_LENS["q_lens"], **kw)
    assert_close(p.contiguous_prefill(tri), p.contiguous_prefill(ref), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_dim_256_variants(dtype):
    """Gemma-2-9B's layers: soft-capped scores, every other layer windowed; and sinks."""
    b = Batch(8, num_q_heads=4, num_kv_heads=2, head_dim=256, block_size=16, dtype=dtype,
              seq_lens=CHUNKED_LENS["lens"])
    p = Batch(9, num_q_heads=4, num_kv_heads=2, head_dim=256, block_size=16, dtype=dtype,
              seq_lens=CHUNKED_LENS["lens"], q_lens=CHUNKED_LENS["q_lens"])
    for kw in (dict(softcap=50.0), dict(softcap=50.0, sliding_window=20), dict(sinks=True)):
        kw = variant_kwargs(kw, b.num_q_heads)
        assert_close(b.paged_decode(tri, num_splits=2, **kw), b.paged_decode(ref, **kw), dtype)
        assert_close(p.paged_prefill(tri, **kw), p.paged_prefill(ref, **kw), dtype)


# ----------------------------------------------------------------------------------------------
# Model-sized shapes on a GPU (and the same checks at tiny shapes everywhere)


def check_all_kernels(dtype, *, num_q_heads, num_kv_heads, head_dim, block_size, lens, q_lens,
                      write_tokens, splits):
    """Decode (both layouts, several split counts), prefill, fp8 caches and the KV write."""
    kw = dict(num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
              block_size=block_size, seq_lens=lens)
    heads = torch.linspace(0.01, 0.03, num_kv_heads)
    b = Batch(1, dtype=dtype, **kw)
    want = b.paged_decode(ref)
    assert torch.isfinite(want.float()).all()
    for num_splits in splits:
        assert_close(b.paged_decode(tri, num_splits=num_splits), want, dtype)
        assert_close(b.contiguous_decode(tri, num_splits=num_splits), want, dtype)
    p = Batch(2, dtype=dtype, q_lens=q_lens, **kw)
    assert_close(p.paged_prefill(tri), p.paged_prefill(ref), dtype)
    assert_close(p.contiguous_prefill(tri), p.contiguous_prefill(ref), dtype)
    if dtype != torch.float32:
        f = Batch(3, dtype=dtype, cache_dtype=ref.FP8_DTYPE, k_scale=heads, v_scale=0.02, **kw)
        assert_close(f.paged_decode(tri), f.paged_decode(ref), dtype)
        assert_close(f.paged_decode(tri, num_splits=1), f.paged_decode(ref), dtype)
        fp = Batch(4, dtype=dtype, cache_dtype=ref.FP8_DTYPE, k_scale=0.02, v_scale=heads,
                   q_lens=q_lens, **kw)
        assert_close(fp.paged_prefill(tri), fp.paged_prefill(ref), dtype)
    # KV write, bit-exact against the reference, fp8 included.
    x = torch.randn(write_tokens, num_kv_heads, head_dim, device=DEVICE).to(dtype) * 5
    slots = torch.randperm(2 * write_tokens, device=DEVICE)[:write_tokens]
    for cache_dtype, scale in ((dtype, None), (ref.FP8_DTYPE, 0.03), (ref.FP8_DTYPE, heads.to(DEVICE))):
        caches = [torch.zeros(2 * write_tokens, num_kv_heads, head_dim, dtype=cache_dtype,
                              device=DEVICE) for _ in range(4)]
        tri.write_kv(x, x, caches[0], caches[1], slots, scale, scale)
        ref.write_kv(x, x, caches[2], caches[3], slots, scale, scale)
        assert torch.equal(caches[0].view(torch.uint8), caches[2].view(torch.uint8))


def test_all_kernels_small():
    check_all_kernels(torch.bfloat16, num_q_heads=8, num_kv_heads=2, head_dim=32, block_size=16,
                      lens=torch.tensor([16, 17, 70, 1]), q_lens=torch.tensor([16, 9, 33, 1]),
                      write_tokens=24, splits=(None, 1, 5))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_model_sized(dtype):
    """Llama-3-8B head shapes (32 q heads, 8 KV heads, head_dim 128, block 16), long contexts;
    then Qwen3-Next's, and (bfloat16) head dims 64 and 80."""
    gen = torch.Generator().manual_seed(0)
    lens = torch.cat([torch.tensor([16, 17, 4096, 1]), torch.randint(1, 3000, (6,), generator=gen)])
    q_lens = torch.minimum(lens, torch.tensor([16, 17, 300, 1, 1, 64, 129, 2, 5, 1000]))
    check_all_kernels(dtype, num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                      lens=lens, q_lens=q_lens, write_tokens=4096, splits=(None, 1, 4, 17))
    # Qwen3-Next's attention (16 q heads over 2 KV heads of 256): the chunked float32 rows.
    check_all_kernels(dtype, num_q_heads=16, num_kv_heads=2, head_dim=256, block_size=16,
                      lens=lens, q_lens=q_lens, write_tokens=512, splits=(None, 1, 5))
    if dtype != torch.bfloat16:
        return
    # Head dims of other models: 64 (many small models), 80 (not a power of two).
    for head_dim in (64, 80):
        check_all_kernels(dtype, num_q_heads=16, num_kv_heads=4, head_dim=head_dim, block_size=32,
                          lens=lens, q_lens=q_lens, write_tokens=512, splits=(None, 3))
