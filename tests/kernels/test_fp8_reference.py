"""fp8 (e4m3) KV cache in the reference kernels: error against the full-precision cache.

Tolerances, from the format: e4m3 has 3 mantissa bits, so rounding to nearest is within half
an ulp, 2^-4 relative, for normal values; subnormals (below 2^-6) are multiples of 2^-9,
within 2^-10 absolute. The cache stores x / s, so one element dequantizes to within

    |x~ - x| <= eps |x| + eta s,    eps = 2^-4, eta = 2^-10.

For attention o = sum_l p_l v_l with p = softmax(c q.k_l): each score moves by at most
delta_l = c sum_d |q_d| (eps |k_ld| + eta s_k), so each weight p_l moves by at most a factor
exp(+-2 delta), delta = max_l delta_l, and

    |o~_d - o_d| <= (exp(2 delta) - 1) max_l |v~_ld| + max_l (eps |v_ld| + eta s_v).

The tests check every output element against that bound (computed from the actual tensors),
and that the kernels' only error is quantization: attention over an fp8 cache equals fp32
attention over the dequantized values.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from kvbench.kernels import cpu_attention
from kvbench.kernels import reference as ref

EPS = 2.0**-4  # e4m3 relative rounding error (normal range)
ETA = 2.0**-10  # e4m3 absolute rounding error in units of the scale (subnormal range)
FP32_SLACK = 1e-5  # float32 arithmetic in both paths


def quant_error_bound(x: torch.Tensor, scale) -> torch.Tensor:
    s = ref._scale_tensor(scale, x.device)
    return EPS * x.abs() + ETA * s


def per_tensor_scale(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax() / ref.FP8_MAX


def per_head_scale(x: torch.Tensor) -> torch.Tensor:  # x [N, Hkv, D] -> [Hkv]
    return x.abs().amax(dim=(0, 2)) / ref.FP8_MAX


def test_quantize_round_trip_within_e4m3_rounding():
    gen = torch.Generator().manual_seed(0)
    # values spread over many binades, down into the subnormal range of the scaled format
    x = torch.randn(4096, 2, 32, generator=gen) * torch.logspace(-4, 1, 32)
    scale = per_tensor_scale(x)
    back = ref.dequantize(ref.quantize_fp8(x, scale), scale)
    err = (back - x).abs()
    assert (err <= quant_error_bound(x, scale) + 1e-12).all()
    normal = x.abs() >= 2.0**-6 * scale
    rel = (err[normal] / x.abs()[normal]).max()
    assert 2.0**-5 < rel <= EPS  # the bound is tight: really 3 mantissa bits


@pytest.mark.parametrize("scale", [0.37, torch.tensor([0.02, 3.5])])
def test_dequantize_is_exactly_float_times_scale_for_every_byte(scale):
    """The fast decode of e4m3 bits gives exactly PyTorch's `.float() * scale` for every
    finite value (subnormals and both zeros included); the two NaN bytes are never written."""
    every = torch.arange(256, dtype=torch.uint8).view(ref.FP8_DTYPE)
    values = every.reshape(128, 2, 1).expand(128, 2, 3)  # [N, Hkv, D], a strided view
    want = values.float() * ref._scale_tensor(scale, values.device)
    got = ref.dequantize(values, scale)
    finite = ~want.isnan()
    assert finite.sum() == 254 * 3
    assert torch.equal(got[finite], want[finite])
    assert torch.equal(got[finite].signbit(), want[finite].signbit())  # -0.0 stays -0.0


def test_quantize_per_head_scales_and_saturation():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 4, 16, generator=gen) * torch.tensor([1e-3, 1.0, 10.0, 100.0])[:, None]
    scale = per_head_scale(x)
    back = ref.dequantize(ref.quantize_fp8(x, scale), scale)
    assert ((back - x).abs() <= quant_error_bound(x, scale) + 1e-12).all()
    # one scale for all heads pushes a small head into e4m3's subnormals (few bits left):
    # floating point keeps relative precision only within the normal range
    one = per_tensor_scale(x)
    coarse = ref.dequantize(ref.quantize_fp8(x, one), one)
    assert (coarse - x)[:, 0].abs().mean() > 10 * (back - x)[:, 0].abs().mean()
    # a scale that is too small saturates at 448 * scale instead of overflowing to nan
    small = torch.tensor(1e-3)
    sat = ref.dequantize(ref.quantize_fp8(x, small), small)
    assert torch.isfinite(sat).all() and sat.abs().max() <= ref.FP8_MAX * 1e-3 + 1e-9


def attention_bound(q, k, v, k_fp8, v_fp8, k_scale, v_scale, softmax_scale, group):
    """Per-element bound on |o~ - o| for queries q [n, Hq, D] over keys k, v [L, Hkv, D]."""
    k_err = quant_error_bound(k, k_scale)  # [L, Hkv, D]
    v_err = quant_error_bound(v, v_scale)
    v_deq = ref.dequantize(v_fp8, v_scale)
    n, num_q_heads, _ = q.shape
    bound = torch.empty(q.shape, dtype=torch.float64)
    for h in range(num_q_heads):
        kvh = h // group
        # delta for each query: max over keys of c * sum_d |q_d| k_err_ld
        delta = softmax_scale * (q[:, h].abs().double() @ k_err[:, kvh].double().T).amax(dim=1)
        weight_term = (torch.exp(2 * delta) - 1)[:, None] * v_deq[:, kvh].abs().amax(0)[None]
        value_term = v_err[:, kvh].amax(0)[None].double()
        bound[:, h] = weight_term + value_term
    return bound


def make_paged_case(seed: int, seq_lens: list[int], query_lens: list[int], block_size: int,
                    num_kv_heads: int, group: int, head_dim: int, per_head: bool):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(math.ceil(n / block_size) for n in seq_lens) + 3
    num_q_heads = num_kv_heads * group
    # K with an outlier channel, as real models have; V plain
    k_cache = torch.randn(num_blocks * block_size, num_kv_heads, head_dim, generator=gen)
    k_cache[..., 0] *= 8
    v_cache = torch.randn(num_blocks * block_size, num_kv_heads, head_dim, generator=gen)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, used = [], 0
    for n in seq_lens:
        count = math.ceil(n / block_size)
        tables.append(perm[used : used + count])
        used += count
    width = max(len(t) for t in tables)
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    q = torch.randn(sum(query_lens), num_q_heads, head_dim, generator=gen)
    scale_of = per_head_scale if per_head else per_tensor_scale
    k_scale, v_scale = scale_of(k_cache), scale_of(v_cache)
    k_fp8 = ref.quantize_fp8(k_cache, k_scale)
    v_fp8 = ref.quantize_fp8(v_cache, v_scale)
    return q, k_cache, v_cache, k_fp8, v_fp8, k_scale, v_scale, block_tables


@pytest.mark.parametrize("per_head", [False, True])
def test_paged_prefill_attention_fp8_within_e4m3_bound(per_head):
    block_size, num_kv_heads, group, head_dim = 8, 2, 4, 32
    seq_lens, query_lens = [37, 20, 64], [37, 5, 16]  # a whole prompt and two cached prefixes
    q, k, v, k8, v8, ks, vs, tables = make_paged_case(
        2, seq_lens, query_lens, block_size, num_kv_heads, group, head_dim, per_head
    )
    c = head_dim**-0.5
    qsl = torch.tensor([0] + list(itertools.accumulate(query_lens)), dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    exact = ref.paged_attention(q, k, v, tables, qsl, lens, block_size, c)
    fp8 = ref.paged_attention(q, k8, v8, tables, qsl, lens, block_size, c, ks, vs)
    # the only error is quantization: same as fp32 attention over the dequantized cache
    deq = ref.paged_attention(q, ref.dequantize(k8, ks), ref.dequantize(v8, vs), tables, qsl,
                              lens, block_size, c)
    torch.testing.assert_close(fp8, deq, atol=FP32_SLACK, rtol=FP32_SLACK)
    err = (fp8 - exact).abs().double()
    worst = 0.0
    for i, seq_len in enumerate(seq_lens):
        lo, hi = int(qsl[i]), int(qsl[i + 1])
        slots = ref.paged_slots(tables[i], seq_len, block_size)
        bound = attention_bound(q[lo:hi], k[slots], v[slots], k8[slots], v8[slots], ks, vs, c,
                                group)
        assert (err[lo:hi] <= bound + FP32_SLACK).all(), f"sequence {i} exceeds the e4m3 bound"
        worst = max(worst, float((err[lo:hi] / bound).max()))
    assert err.max() > 0  # the cache really is quantized
    assert worst < 0.5  # and the bound is a bound, not a coincidence


@pytest.mark.parametrize("per_head", [False, True])
def test_paged_decode_attention_fp8_within_e4m3_bound(per_head):
    block_size, num_kv_heads, group, head_dim = 16, 2, 4, 32
    seq_lens = [1, 17, 100, 48]
    q, k, v, k8, v8, ks, vs, tables = make_paged_case(
        3, seq_lens, [1] * len(seq_lens), block_size, num_kv_heads, group, head_dim, per_head
    )
    c = head_dim**-0.5
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    exact = ref.paged_decode_attention(q, k, v, tables, lens, block_size, c)
    fp8 = ref.paged_decode_attention(q, k8, v8, tables, lens, block_size, c, ks, vs)
    deq = ref.paged_decode_attention(q, ref.dequantize(k8, ks), ref.dequantize(v8, vs), tables,
                                     lens, block_size, c)
    torch.testing.assert_close(fp8, deq, atol=FP32_SLACK, rtol=FP32_SLACK)
    err = (fp8 - exact).abs().double()
    for i, seq_len in enumerate(seq_lens):
        slots = ref.paged_slots(tables[i], seq_len, block_size)
        bound = attention_bound(q[i : i + 1], k[slots], v[slots], k8[slots], v8[slots], ks, vs,
                                c, group)
        assert (err[i : i + 1] <= bound + FP32_SLACK).all(), f"sequence {i} exceeds the bound"
    # typical error: a few percent of the output's scale, as 2^-4 rounding implies
    assert err.mean() < EPS * exact.abs().mean()


def test_write_kv_quantizes_with_the_given_scale():
    gen = torch.Generator().manual_seed(4)
    k = torch.randn(5, 2, 8, generator=gen)
    v = torch.randn(5, 2, 8, generator=gen) * 3
    k_cache = torch.zeros(16, 2, 8, dtype=ref.FP8_DTYPE)
    v_cache = torch.zeros(16, 2, 8, dtype=ref.FP8_DTYPE)
    slots = torch.tensor([3, 9, 0, 15, 7])
    ks, vs = per_tensor_scale(k), per_tensor_scale(v)
    ref.write_kv(k, v, k_cache, v_cache, slots, ks, vs)
    assert ((ref.dequantize(k_cache[slots], ks) - k).abs() <= quant_error_bound(k, ks)).all()
    assert ((ref.dequantize(v_cache[slots], vs) - v).abs() <= quant_error_bound(v, vs)).all()
    untouched = torch.ones(16, dtype=torch.bool)
    untouched[slots] = False
    assert (k_cache[untouched].float() == 0).all()


def test_write_kv_writes_of_one_shape_stay_apart():
    """The write quantizes into reused buffers: the next write of the same shape (every
    decode step's) must not change what the last one stored."""
    gen = torch.Generator().manual_seed(5)
    k_cache = torch.zeros(8, 2, 4, dtype=ref.FP8_DTYPE)
    v_cache = torch.zeros(8, 2, 4, dtype=ref.FP8_DTYPE)
    written = []
    for slot in range(4):
        k, v = torch.randn(1, 2, 4, generator=gen), torch.randn(1, 2, 4, generator=gen)
        ref.write_kv(k, v, k_cache, v_cache, torch.tensor([slot]), 0.01, 0.02)
        written.append((ref.quantize_fp8(k, 0.01), ref.quantize_fp8(v, 0.02)))
    for slot, (k8, v8) in enumerate(written):
        assert torch.equal(k_cache[slot : slot + 1].view(torch.uint8), k8.view(torch.uint8))
        assert torch.equal(v_cache[slot : slot + 1].view(torch.uint8), v8.view(torch.uint8))


@pytest.mark.parametrize("ops", [ref, cpu_attention], ids=["reference", "cpu_attention"])
def test_paged_decode_fp8_keeps_autograd_working(ops):
    """A decode over an fp8 cache has a gradient for its queries (the V scale must not be
    applied in place to a tensor autograd keeps)."""
    gen = torch.Generator().manual_seed(6)
    q = torch.randn(2, 4, 8, generator=gen, requires_grad=True)
    k, v = torch.randn(64, 2, 8, generator=gen), torch.randn(64, 2, 8, generator=gen)
    ks, vs = per_tensor_scale(k), per_tensor_scale(v)
    tables = torch.arange(4, dtype=torch.int32).view(2, 2)
    lens = torch.tensor([20, 31])
    out = ops.paged_decode_attention(q, ref.quantize_fp8(k, ks), ref.quantize_fp8(v, vs),
                                     tables, lens, 16, 0.1, ks, vs)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
