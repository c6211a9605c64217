"""Tests of the PyTorch reference kernels (kvbench.kernels.reference) against a naive
per-token / per-head loop (the score variants in the torch backend's kernels too), plus the
attention backend selection (kvbench.kernels.backend)."""

from __future__ import annotations

import math

import pytest
import torch

from kvbench.errors import KvbenchInputError
from kvbench.kernels import backend, cpu_attention
from kvbench.kernels import reference as ref
from kvbench.kernels.attention_ops import AttentionOps

# e4m3 has 3 mantissa bits: round-to-nearest is within half an ulp, 2^-3 / 2 = 2^-4 relative,
# for normal values; subnormals (below 2^-6) are multiples of 2^-9, within 2^-10 absolute.
E4M3_REL = 2.0**-4
E4M3_SUBNORMAL_ABS = 2.0**-10


# ----------------------------------------------------------------------------------------------
# Naive implementation: independent of reference.py (python loops, float64)


def naive_varlen(q, k_cache, v_cache, query_start_loc, seq_lens, slot_of, softmax_scale,
                 k_scale=None, v_scale=None, sliding_window=None, softcap=None, sinks=None):
    """Causal attention one (query token, head) at a time. `slot_of(seq, pos) -> int`.

    A window keeps keys j with pos - W < j <= pos; a soft cap maps each score s to
    c * tanh(s / c); a sink adds exp(sink) to the softmax's denominator only."""
    num_q_heads = q.shape[1]
    num_kv_heads = k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    out = torch.zeros(q.shape, dtype=torch.float64)
    starts = [int(x) for x in query_start_loc]
    for i, seq_len in enumerate(int(x) for x in seq_lens):
        q_len = starts[i + 1] - starts[i]
        for t in range(q_len):
            pos = seq_len - q_len + t
            lowest = 0 if sliding_window is None else max(0, pos - sliding_window + 1)
            slots = [slot_of(i, j) for j in range(lowest, pos + 1)]
            for h in range(num_q_heads):
                kvh = h // group
                ks = _head_scale(k_scale, kvh)
                vs = _head_scale(v_scale, kvh)
                qv = q[starts[i] + t, h].double()
                scores = []
                for s in slots:
                    kv = k_cache[s, kvh].double() * (ks if ref.is_fp8(k_cache) else 1.0)
                    score = float(qv @ kv) * softmax_scale
                    if softcap is not None:
                        score = softcap * math.tanh(score / softcap)
                    scores.append(score)
                mx = max(scores)
                weights = [math.exp(x - mx) for x in scores]
                total = sum(weights)
                if sinks is not None:
                    total += math.exp(float(sinks[h]) - mx)
                acc = torch.zeros(q.shape[2], dtype=torch.float64)
                for w, s in zip(weights, slots, strict=True):
                    acc += (w / total) * v_cache[s, kvh].double() * (vs if ref.is_fp8(v_cache) else 1.0)
                out[starts[i] + t, h] = acc
    return out


def _head_scale(scale, head):
    if scale is None:
        return 1.0
    t = torch.as_tensor(scale, dtype=torch.float64)
    return float(t.reshape(-1)[head]) if t.numel() > 1 else float(t)


def paged_slot_of(block_tables, block_size):
    return lambda i, j: int(block_tables[i, j // block_size]) * block_size + j % block_size


def contiguous_slot_of(start_slots):
    return lambda i, j: int(start_slots[i]) + j


# ----------------------------------------------------------------------------------------------
# Fixtures


def make_batch(seed, *, num_seqs, num_q_heads, num_kv_heads, head_dim, block_size, max_len,
               full_prefill=False, dtype=torch.float32):
    """A random paged cache and the same data in a contiguous cache."""
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.randint(1, max_len + 1, (num_seqs,), generator=g)
    if full_prefill:
        q_lens = seq_lens.clone()
    else:
        q_lens = torch.minimum(seq_lens, torch.randint(1, 6, (num_seqs,), generator=g))
    query_start_loc = torch.zeros(num_seqs + 1, dtype=torch.int64)
    query_start_loc[1:] = torch.cumsum(q_lens, 0)
    blocks_per_seq = -(-max_len // block_size)
    num_blocks = num_seqs * blocks_per_seq + 3
    perm = torch.randperm(num_blocks, generator=g)[: num_seqs * blocks_per_seq]
    block_tables = perm.reshape(num_seqs, blocks_per_seq).to(torch.int32)
    k_cache = torch.randn(num_blocks * block_size, num_kv_heads, head_dim, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks * block_size, num_kv_heads, head_dim, generator=g).to(dtype)
    # Contiguous copy: sequence i at [start_slots[i], start_slots[i] + seq_len), gaps between.
    start_slots = torch.zeros(num_seqs, dtype=torch.int64)
    pos = 5
    for i in range(num_seqs):
        start_slots[i] = pos
        pos += int(seq_lens[i]) + 3
    kc = torch.zeros(pos, num_kv_heads, head_dim).to(dtype)
    vc = torch.zeros(pos, num_kv_heads, head_dim).to(dtype)
    for i in range(num_seqs):
        n = int(seq_lens[i])
        src = ref.paged_slots(block_tables[i], n, block_size)
        dst = ref.contiguous_slots(int(start_slots[i]), n, torch.device("cpu"))
        kc[dst] = k_cache[src]
        vc[dst] = v_cache[src]
    q = torch.randn(int(q_lens.sum()), num_q_heads, head_dim, generator=g).to(dtype)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
                query_start_loc=query_start_loc, seq_lens=seq_lens, start_slots=start_slots,
                kc=kc, vc=vc, block_size=block_size, softmax_scale=head_dim**-0.5)


GQA = [(4, 4), (4, 1), (8, 1)]  # (q heads, kv heads): ratios 1, 4, 8


# ----------------------------------------------------------------------------------------------
# Attention


@pytest.mark.parametrize("num_q_heads,num_kv_heads", GQA)
@pytest.mark.parametrize("block_size", [1, 4, 8])
def test_paged_attention_matches_naive(num_q_heads, num_kv_heads, block_size):
    b = make_batch(num_q_heads * 10 + block_size, num_seqs=3, num_q_heads=num_q_heads,
                   num_kv_heads=num_kv_heads, head_dim=8, block_size=block_size, max_len=19)
    got = ref.paged_attention(b["q"], b["k_cache"], b["v_cache"], b["block_tables"],
                              b["query_start_loc"], b["seq_lens"], block_size, b["softmax_scale"])
    want = naive_varlen(b["q"], b["k_cache"], b["v_cache"], b["query_start_loc"], b["seq_lens"],
                        paged_slot_of(b["block_tables"], block_size), b["softmax_scale"])
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


VARIANTS = [
    dict(sliding_window=5),
    dict(sliding_window=1),
    dict(softcap=2.0),
    dict(sinks=True),
    dict(sliding_window=7, softcap=3.0, sinks=True),
]


def _variant(kw, num_q_heads):
    kw = dict(kw)
    if kw.pop("sinks", False):
        kw["sinks"] = torch.linspace(-1.0, 2.0, num_q_heads)
    return kw


def _stale_before_window(b, window, block_size):
    """Point every table entry wholly before each sequence's window at one poisoned block (as
    a strategy that frees them leaves them): a kernel that reads it gives NaN."""
    tables = b["block_tables"].clone()
    unused = set(range(b["k_cache"].shape[0] // block_size)) - set(tables.flatten().tolist())
    poison = min(unused)
    b["k_cache"][poison * block_size:(poison + 1) * block_size] = float("nan")
    b["v_cache"][poison * block_size:(poison + 1) * block_size] = float("nan")
    starts = b["query_start_loc"].tolist()
    for i, n in enumerate(b["seq_lens"].tolist()):
        first = ref.first_visible(n, starts[i + 1] - starts[i], window)
        tables[i, : first // block_size] = poison
    return tables


@pytest.mark.parametrize("ops", [ref, cpu_attention], ids=["reference", "cpu_attention"])
@pytest.mark.parametrize("num_q_heads,num_kv_heads", GQA)
@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_variants_match_naive(num_q_heads, num_kv_heads, variant, ops):
    """Window, soft cap and sinks, in prefill and decode, paged and contiguous, against the
    naive loop, in the reference and the torch backend's kernels; a window's paged reads skip
    the blocks before it."""
    block_size = 4
    kw = _variant(variant, num_q_heads)
    window = kw.get("sliding_window")
    b = make_batch(num_q_heads + 3, num_seqs=4, num_q_heads=num_q_heads,
                   num_kv_heads=num_kv_heads, head_dim=8, block_size=block_size, max_len=31)
    tables = (_stale_before_window(b, window, block_size) if window
              else b["block_tables"])
    want = naive_varlen(b["q"], b["kc"], b["vc"], b["query_start_loc"], b["seq_lens"],
                        contiguous_slot_of(b["start_slots"]), b["softmax_scale"], **kw)
    paged = ops.paged_attention(b["q"], b["k_cache"], b["v_cache"], tables,
                                b["query_start_loc"], b["seq_lens"], block_size,
                                b["softmax_scale"], **kw)
    contig = ops.contiguous_attention(b["q"], b["kc"], b["vc"], b["start_slots"],
                                      b["query_start_loc"], b["seq_lens"], b["softmax_scale"],
                                      **kw)
    torch.testing.assert_close(paged.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(contig.double(), want, rtol=1e-5, atol=1e-6)

    d = _decode_batch(num_q_heads + 5, num_q_heads, num_kv_heads, block_size=block_size)
    tables = _stale_before_window(d, window, block_size) if window else d["block_tables"]
    want = naive_varlen(d["q"], d["kc"], d["vc"], d["query_start_loc"], d["seq_lens"],
                        contiguous_slot_of(d["start_slots"]), d["softmax_scale"], **kw)
    paged_dec = ops.paged_decode_attention(d["q"], d["k_cache"], d["v_cache"], tables,
                                           d["seq_lens"], block_size, d["softmax_scale"], **kw)
    contig_dec = ops.contiguous_decode_attention(d["q"], d["kc"], d["vc"], d["start_slots"],
                                                 d["seq_lens"], d["softmax_scale"], **kw)
    torch.testing.assert_close(paged_dec.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(contig_dec.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_q_heads,num_kv_heads", GQA)
def test_contiguous_attention_matches_naive(num_q_heads, num_kv_heads):
    b = make_batch(7, num_seqs=3, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                   head_dim=8, block_size=4, max_len=17, full_prefill=True)
    got = ref.contiguous_attention(b["q"], b["kc"], b["vc"], b["start_slots"],
                                   b["query_start_loc"], b["seq_lens"], b["softmax_scale"])
    want = naive_varlen(b["q"], b["kc"], b["vc"], b["query_start_loc"], b["seq_lens"],
                        contiguous_slot_of(b["start_slots"]), b["softmax_scale"])
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_q_heads,num_kv_heads", GQA)
@pytest.mark.parametrize("full_prefill", [False, True])
def test_paged_equals_contiguous_on_same_data(num_q_heads, num_kv_heads, full_prefill):
    b = make_batch(3, num_seqs=4, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                   head_dim=16, block_size=8, max_len=33, full_prefill=full_prefill)
    paged = ref.paged_attention(b["q"], b["k_cache"], b["v_cache"], b["block_tables"],
                                b["query_start_loc"], b["seq_lens"], 8, b["softmax_scale"])
    contig = ref.contiguous_attention(b["q"], b["kc"], b["vc"], b["start_slots"],
                                      b["query_start_loc"], b["seq_lens"], b["softmax_scale"])
    torch.testing.assert_close(paged, contig, rtol=1e-6, atol=1e-6)


def _decode_batch(seed, num_q_heads, num_kv_heads, block_size=8, max_len=40):
    b = make_batch(seed, num_seqs=4, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                   head_dim=16, block_size=block_size, max_len=max_len)
    num_seqs = b["seq_lens"].shape[0]
    b["q"] = torch.randn(num_seqs, num_q_heads, 16, generator=torch.Generator().manual_seed(seed))
    b["query_start_loc"] = torch.arange(num_seqs + 1)
    return b


@pytest.mark.parametrize("num_q_heads,num_kv_heads", GQA)
def test_decode_equals_varlen_with_q_len_1(num_q_heads, num_kv_heads):
    b = _decode_batch(11, num_q_heads, num_kv_heads)
    paged_dec = ref.paged_decode_attention(b["q"], b["k_cache"], b["v_cache"], b["block_tables"],
                                           b["seq_lens"], 8, b["softmax_scale"])
    paged_var = ref.paged_attention(b["q"], b["k_cache"], b["v_cache"], b["block_tables"],
                                    b["query_start_loc"], b["seq_lens"], 8, b["softmax_scale"])
    torch.testing.assert_close(paged_dec, paged_var, rtol=1e-5, atol=1e-6)
    contig_dec = ref.contiguous_decode_attention(b["q"], b["kc"], b["vc"], b["start_slots"],
                                                 b["seq_lens"], b["softmax_scale"])
    contig_var = ref.contiguous_attention(b["q"], b["kc"], b["vc"], b["start_slots"],
                                          b["query_start_loc"], b["seq_lens"], b["softmax_scale"])
    torch.testing.assert_close(contig_dec, contig_var, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(paged_dec, contig_dec, rtol=1e-5, atol=1e-6)
    want = naive_varlen(b["q"], b["k_cache"], b["v_cache"], b["query_start_loc"], b["seq_lens"],
                        paged_slot_of(b["block_tables"], 8), b["softmax_scale"])
    torch.testing.assert_close(paged_dec.double(), want, rtol=1e-5, atol=1e-6)


def test_contiguous_decode_at_the_end_of_the_arena():
    """Padding positions of a short sequence would run past the arena; they must be masked."""
    g = torch.Generator().manual_seed(0)
    kc = torch.randn(20, 1, 8, generator=g)
    vc = torch.randn(20, 1, 8, generator=g)
    q = torch.randn(2, 2, 8, generator=g)
    start_slots = torch.tensor([0, 17])
    seq_lens = torch.tensor([15, 3])
    got = ref.contiguous_decode_attention(q, kc, vc, start_slots, seq_lens, 0.3)
    want = naive_varlen(q, kc, vc, torch.arange(3), seq_lens, contiguous_slot_of(start_slots), 0.3)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_output_dtype_follows_q(dtype):
    b = _decode_batch(2, 4, 2)
    q = b["q"].to(dtype)
    out = ref.paged_decode_attention(q, b["k_cache"].to(dtype), b["v_cache"].to(dtype),
                                     b["block_tables"], b["seq_lens"], 8, b["softmax_scale"])
    assert out.dtype == dtype
    full = ref.paged_decode_attention(b["q"], b["k_cache"], b["v_cache"], b["block_tables"],
                                      b["seq_lens"], 8, b["softmax_scale"])
    torch.testing.assert_close(out.float(), full, rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------------------------
# KV write and fp8


def test_write_kv_scatters_to_slots():
    g = torch.Generator().manual_seed(1)
    k = torch.randn(5, 2, 8, generator=g)
    v = torch.randn(5, 2, 8, generator=g)
    k_cache = torch.zeros(16, 2, 8, dtype=torch.bfloat16)
    v_cache = torch.zeros(16, 2, 8, dtype=torch.bfloat16)
    slots = torch.tensor([9, 0, 15, 3, 4], dtype=torch.int32)
    ref.write_kv(k, v, k_cache, v_cache, slots)
    for t, s in enumerate(slots.tolist()):
        assert torch.equal(k_cache[s], k[t].bfloat16())
        assert torch.equal(v_cache[s], v[t].bfloat16())
    untouched = sorted(set(range(16)) - set(slots.tolist()))
    assert not k_cache[untouched].any() and not v_cache[untouched].any()


@pytest.mark.parametrize("scale", [0.05, torch.tensor([0.04, 0.1])], ids=["scalar", "per_head"])
def test_fp8_quantization_error_is_bounded(scale):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 2, 16, generator=g) * 3
    x[0, 0, 0] = 1e4  # saturates at 448 * scale
    q8 = ref.quantize_fp8(x, scale)
    assert q8.dtype == ref.FP8_DTYPE
    back = ref.dequantize(q8, scale)
    s = torch.as_tensor(scale, dtype=torch.float32).reshape(-1, 1)
    bound = E4M3_REL * x.abs() + E4M3_SUBNORMAL_ABS * s
    err = (back - x).abs()
    err[0, 0, 0] = 0.0
    assert (err <= bound).all()
    assert torch.allclose(back[0, 0, 0], ref.FP8_MAX * s.reshape(-1)[0])


def test_fp8_write_kv_quantizes():
    g = torch.Generator().manual_seed(3)
    k = torch.randn(4, 2, 8, generator=g)
    v = torch.randn(4, 2, 8, generator=g)
    k_cache = torch.zeros(8, 2, 8, dtype=ref.FP8_DTYPE)
    v_cache = torch.zeros(8, 2, 8, dtype=ref.FP8_DTYPE)
    slots = torch.tensor([7, 1, 2, 5])
    ref.write_kv(k, v, k_cache, v_cache, slots, 0.01, torch.tensor([0.02, 0.03]))
    assert torch.equal(k_cache[slots].view(torch.uint8), ref.quantize_fp8(k, 0.01).view(torch.uint8))
    assert torch.equal(v_cache[slots].view(torch.uint8),
                       ref.quantize_fp8(v, torch.tensor([0.02, 0.03])).view(torch.uint8))


def fp8_attention_bound(q, k, v, softmax_scale, k_scale, v_scale):
    """Worst-case |attn(fp8 K/V) - attn(K/V)| per decode query `[S, Hq]` (one sequence each).

    Each dequantized element is within E4M3_REL * |x| + E4M3_SUBNORMAL_ABS * scale of x. A score
    moves by at most d = softmax_scale * sum_d |q_d| * err(k_d), which changes the softmax
    weights by at most a total variation of exp(2 * max d) - 1; so the output moves by at most
    (exp(2 max d) - 1) * max|v| + max err(v). `k`, `v`: `[S, L, Hkv, D]`, `q` `[S, Hq, D]`.
    """
    num_q_heads = q.shape[1]
    group = num_q_heads // k.shape[2]
    ks = torch.as_tensor(k_scale, dtype=torch.float32).reshape(-1)
    vs = torch.as_tensor(v_scale, dtype=torch.float32).reshape(-1)
    ks = ks.expand(k.shape[2]).reshape(1, 1, -1, 1)
    vs = vs.expand(k.shape[2]).reshape(1, 1, -1, 1)
    k_err = E4M3_REL * k.abs() + E4M3_SUBNORMAL_ABS * ks
    v_err = E4M3_REL * v.abs() + E4M3_SUBNORMAL_ABS * vs
    k_err = k_err.repeat_interleave(group, dim=2)  # [S, L, Hq, D]
    shift = softmax_scale * torch.einsum("shd,slhd->shl", q.abs(), k_err).amax(-1)
    v_max = v.abs().repeat_interleave(group, dim=2).amax(dim=(1, 3))
    v_err_max = v_err.repeat_interleave(group, dim=2).amax(dim=(1, 3))
    return (torch.exp(2 * shift) - 1) * v_max + v_err_max


@pytest.mark.parametrize("scale_kind", ["scalar", "per_head"])
def test_fp8_attention_error_is_bounded(scale_kind):
    g = torch.Generator().manual_seed(4)
    num_seqs, seq_len, num_kv_heads, num_q_heads, head_dim = 3, 24, 2, 8, 16
    k = torch.randn(num_seqs, seq_len, num_kv_heads, head_dim, generator=g)
    v = torch.randn(num_seqs, seq_len, num_kv_heads, head_dim, generator=g)
    q = torch.randn(num_seqs, num_q_heads, head_dim, generator=g)
    k_scale = 0.02 if scale_kind == "scalar" else torch.tensor([0.02, 0.01])
    v_scale = 0.015 if scale_kind == "scalar" else torch.tensor([0.01, 0.03])
    k_cache = k.reshape(-1, num_kv_heads, head_dim)
    v_cache = v.reshape(-1, num_kv_heads, head_dim)
    k8 = torch.zeros(k_cache.shape, dtype=ref.FP8_DTYPE)
    v8 = torch.zeros(v_cache.shape, dtype=ref.FP8_DTYPE)
    ref.write_kv(k_cache, v_cache, k8, v8, torch.arange(k_cache.shape[0]), k_scale, v_scale)
    start_slots = torch.arange(num_seqs) * seq_len
    seq_lens = torch.full((num_seqs,), seq_len)
    scale = head_dim**-0.5
    exact = ref.contiguous_decode_attention(q, k_cache, v_cache, start_slots, seq_lens, scale)
    quant = ref.contiguous_decode_attention(q, k8, v8, start_slots, seq_lens, scale,
                                            k_scale, v_scale)
    err = (quant - exact).abs().amax(-1)
    bound = fp8_attention_bound(q, k, v, scale, k_scale, v_scale)
    assert (err <= bound).all()
    # The worst case is loose; typical errors are far smaller (about 2^-4 of |v| at most).
    assert err.max() < E4M3_REL * v.abs().max()
    # The fp8 path equals attention over the dequantized values.
    deq = ref.contiguous_decode_attention(q, ref.dequantize(k8, k_scale), ref.dequantize(v8, v_scale),
                                          start_slots, seq_lens, scale)
    torch.testing.assert_close(quant, deq, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Backend selection (kvbench.kernels.backend)


def test_backend_torch_and_auto_on_cpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = torch.device("cpu")
    assert backend.resolve_backend("torch", cpu) == "torch"
    assert backend.resolve_backend("auto", cpu) == "torch"
    ops = backend.get_ops("torch")
    assert isinstance(ops, AttentionOps) and ops.name == "torch"
    assert backend.get_ops("torch") is ops  # one per process


def test_torch_ops_agree_with_the_reference():
    ops = backend.get_ops("torch")
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 16, generator=gen)
    k = torch.randn(40, 2, 16, generator=gen)
    args = (torch.tensor([0, 20]), torch.tensor([7, 20], dtype=torch.int32), 0.25)
    torch.testing.assert_close(ops.contiguous_decode_attention(q, k, k, *args),
                               ref.contiguous_decode_attention(q, k, k, *args),
                               rtol=1e-5, atol=1e-6)
    assert ops.precompile(None, torch.device("cpu")) == 0.0


def test_backend_triton_on_cpu_needs_interpreter(monkeypatch):
    monkeypatch.setattr(backend, "triton_importable", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KvbenchInputError, match="TRITON_INTERPRET=1") as info:
        backend.resolve_backend("triton", torch.device("cpu"))
    assert "\n" not in str(info.value)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backend.resolve_backend("triton", torch.device("cpu")) == "triton"
    assert backend.resolve_backend("auto", torch.device("cpu")) == "torch"


def test_backend_without_triton(monkeypatch):
    monkeypatch.setattr(backend, "triton_importable", lambda: False)
    assert backend.resolve_backend("auto", torch.device("cuda")) == "torch"
    with pytest.raises(KvbenchInputError, match="not installed"):
        backend.resolve_backend("triton", torch.device("cuda"))


def test_backend_auto_on_cuda_prefers_triton(monkeypatch):
    monkeypatch.setattr(backend, "triton_importable", lambda: True)
    assert backend.resolve_backend("auto", torch.device("cuda")) == "triton"
    assert backend.resolve_backend("triton", torch.device("cuda:0")) == "triton"


def test_backend_rejects_unknown_names():
    with pytest.raises(KvbenchInputError, match="unknown attention backend"):
        backend.resolve_backend("flash", torch.device("cpu"))
    with pytest.raises(KvbenchInputError):
        backend.get_ops("auto")


def test_get_ops_modules_share_the_api():
    pytest.importorskip("triton")
    import inspect

    triton_ops = backend.get_ops("triton")
    for name in ("write_kv", "paged_attention", "contiguous_attention",
                 "paged_decode_attention", "contiguous_decode_attention"):
        ref_params = list(inspect.signature(getattr(ref, name)).parameters.values())
        tri_params = list(inspect.signature(getattr(triton_ops, name)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in tri_params[: len(ref_params)]] == [
            (p.name, p.kind, p.default) for p in ref_params
        ]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in tri_params[len(ref_params):])


def test_triton_ops_import_fails_cleanly_without_triton(monkeypatch):
    import importlib
    import sys

    for mod in [m for m in sys.modules if m.startswith("kvbench.kernels.triton")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    with pytest.raises(ImportError):
        importlib.import_module("kvbench.kernels.triton_ops")
