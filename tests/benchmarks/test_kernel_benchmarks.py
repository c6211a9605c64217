"""Kernel micro-benchmarks (pytest-benchmark): decode attention paged vs contiguous at equal
shapes, prefill, KV write, fp8 vs bf16 caches, and a plain copy as the bandwidth yardstick.

On CUDA the Triton kernels run at full size (Llama-3-8B attention shapes: 32 query heads,
8 KV heads, head_dim 128, block 16). Elsewhere the PyTorch reference runs at tiny shapes with
few rounds ("quick mode": the file finishes in seconds; the numbers only prove the cases run).

Every case records `extra_info["bytes_moved"]` (per kernel call: K/V read or written plus Q/O
moved; block tables and slot mappings left out) and `extra_info["bandwidth_GBps"]`
(bytes_moved / mean time per call). "Percent of copy bandwidth" = a case's bandwidth_GBps /
the `copy_bandwidth` case's.
"""

from __future__ import annotations

import functools

import pytest
import torch

from kvbench.kernels import backend
from kvbench.kernels import reference as ref

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BACKEND = backend.resolve_backend("auto", DEVICE)
OPS = backend.get_ops(BACKEND)
FULL = DEVICE.type == "cuda"

NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
SOFTMAX_SCALE = HEAD_DIM**-0.5
FP8_SCALE = 0.05

if FULL:
    DECODE_BATCHES, DECODE_CONTEXTS = (1, 16, 64), (1024, 4096, 16384)
    PREFILL_SHAPES = ((4, 2048, 2048), (4, 4608, 512))  # (sequences, seq_len, q_len)
    WRITE_TOKENS = 8192
    COPY_BYTES = 1 << 30
    ROUNDS, WARMUP, CALLS = 20, 2, 10  # CALLS kernel launches per timed call, one sync
else:
    DECODE_BATCHES, DECODE_CONTEXTS = (1, 4), (64, 256)
    PREFILL_SHAPES = ((2, 64, 64), (2, 96, 32))
    WRITE_TOKENS = 256
    COPY_BYTES = 16 << 20
    ROUNDS, WARMUP, CALLS = 3, 1, 1

KV_DTYPES = {"bf16": torch.bfloat16, "fp8": ref.FP8_DTYPE}


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def run_and_record(benchmark, fn, bytes_moved: int, group: str, **extra) -> None:
    """Time `fn` (CALLS calls then a sync per round) and record bytes and bandwidth per call."""

    def target():
        for _ in range(CALLS):
            fn()
        _sync()

    benchmark.group = group
    benchmark.extra_info.update(backend=BACKEND, bytes_moved=int(bytes_moved),
                                calls_per_round=CALLS, **extra)
    benchmark.pedantic(target, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    record_bandwidth(benchmark, bytes_moved)


def record_bandwidth(benchmark, bytes_moved: int) -> None:
    """bandwidth_GBps = bytes per call / mean seconds per call (nothing when timing is off)."""
    stats = getattr(benchmark, "stats", None)
    mean = getattr(getattr(stats, "stats", None), "mean", None)
    if not mean:
        return
    per_call = mean / CALLS
    benchmark.extra_info["time_per_call_s"] = per_call
    benchmark.extra_info["bandwidth_GBps"] = bytes_moved / per_call / 1e9
    flops = benchmark.extra_info.get("flops")
    if flops:
        benchmark.extra_info["tflops"] = flops / per_call / 1e12


def _elem(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _random_cache(num_slots: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(num_slots, NUM_KV_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
    return x if dtype == torch.bfloat16 else ref.quantize_fp8(x, FP8_SCALE)


@functools.lru_cache(maxsize=1)
def decode_arena(batch: int, context: int, kv_dtype: str):
    """One K/V arena per shape, read through shuffled block tables (paged) or as one
    contiguous run per sequence (contiguous): the same data and bytes for both layouts."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    blocks_per_seq = -(-context // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    dtype = KV_DTYPES[kv_dtype]
    k_cache = _random_cache(num_blocks * BLOCK_SIZE, dtype)
    v_cache = _random_cache(num_blocks * BLOCK_SIZE, dtype)
    tables = torch.randperm(num_blocks, generator=gen).reshape(batch, blocks_per_seq)
    return dict(
        k_cache=k_cache, v_cache=v_cache,
        block_tables=tables.to(torch.int32).to(DEVICE),
        start_slots=(torch.arange(batch) * blocks_per_seq * BLOCK_SIZE).to(DEVICE),
        seq_lens=torch.full((batch,), context, dtype=torch.int32, device=DEVICE),
        q=torch.randn(batch, NUM_Q_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16),
    )


def _scales(kv_dtype: str):
    return (FP8_SCALE, FP8_SCALE) if kv_dtype == "fp8" else (None, None)


def decode_bytes(batch: int, context: int, kv_dtype: str) -> int:
    kv = 2 * batch * context * NUM_KV_HEADS * HEAD_DIM * _elem(KV_DTYPES[kv_dtype])
    qo = 2 * batch * NUM_Q_HEADS * HEAD_DIM * _elem(torch.bfloat16)
    return kv + qo


DECODE_CASES = [
    pytest.param(kv, b, c, layout, id=f"{kv}-b{b}-ctx{c}-{layout}")
    for kv in KV_DTYPES
    for b in DECODE_BATCHES
    for c in DECODE_CONTEXTS
    for layout in ("paged", "contiguous")
]


@pytest.mark.parametrize("kv_dtype,batch,context,layout", DECODE_CASES)
def test_decode_attention(benchmark, kv_dtype, batch, context, layout):
    a = decode_arena(batch, context, kv_dtype)
    k_scale, v_scale = _scales(kv_dtype)
    extra = {"num_splits": None} if BACKEND == "triton" else {}
    # Known maximum length: no device sync inside the timed call on the Triton path.
    info = {}
    if BACKEND == "triton":
        extra["max_seq_len"] = context
        info["num_splits"] = OPS.choose_num_splits(batch, NUM_KV_HEADS, context, DEVICE)
    if layout == "paged":
        def fn():
            return OPS.paged_decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_tables"],
                                              a["seq_lens"], BLOCK_SIZE, SOFTMAX_SCALE, k_scale,
                                              v_scale, **extra)
    else:
        def fn():
            return OPS.contiguous_decode_attention(a["q"], a["k_cache"], a["v_cache"],
                                                   a["start_slots"], a["seq_lens"], SOFTMAX_SCALE,
                                                   k_scale, v_scale, **extra)
    run_and_record(benchmark, fn, decode_bytes(batch, context, kv_dtype),
                   group=f"decode-{kv_dtype}-b{batch}-ctx{context}", layout=layout,
                   kv_dtype=kv_dtype, batch=batch, context=context, **info)


@pytest.mark.skipif(BACKEND != "triton", reason="split-K exists only in the Triton kernels")
@pytest.mark.parametrize("num_splits", [1, None], ids=["no-split", "auto-split"])
def test_decode_split_k(benchmark, num_splits):
    """One long sequence: without split-K only NUM_KV_HEADS programs run."""
    batch, context = 1, max(DECODE_CONTEXTS) * 2
    a = decode_arena(batch, context, "bf16")

    def fn():
        return OPS.paged_decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_tables"],
                                          a["seq_lens"], BLOCK_SIZE, SOFTMAX_SCALE,
                                          num_splits=num_splits, max_seq_len=context)

    run_and_record(benchmark, fn, decode_bytes(batch, context, "bf16"),
                   group=f"decode-split-k-b{batch}-ctx{context}",
                   num_splits=num_splits or OPS.choose_num_splits(batch, NUM_KV_HEADS, context, DEVICE))


PREFILL_CASES = [
    pytest.param(s, n, q, layout, id=f"s{s}-len{n}-q{q}-{layout}")
    for s, n, q in PREFILL_SHAPES
    for layout in ("paged", "contiguous")
]


@pytest.mark.parametrize("num_seqs,seq_len,q_len,layout", PREFILL_CASES)
def test_prefill_attention(benchmark, num_seqs, seq_len, q_len, layout):
    """Varlen causal prefill of the last `q_len` of `seq_len` tokens per sequence (bf16)."""
    a = decode_arena(num_seqs, seq_len, "bf16")
    q = torch.randn(num_seqs * q_len, NUM_Q_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
    qsl = torch.arange(0, num_seqs + 1, device=DEVICE, dtype=torch.int32) * q_len
    extra = {"max_query_len": q_len} if BACKEND == "triton" else {}
    if layout == "paged":
        def fn():
            return OPS.paged_attention(q, a["k_cache"], a["v_cache"], a["block_tables"], qsl,
                                       a["seq_lens"], BLOCK_SIZE, SOFTMAX_SCALE, **extra)
    else:
        def fn():
            return OPS.contiguous_attention(q, a["k_cache"], a["v_cache"], a["start_slots"], qsl,
                                            a["seq_lens"], SOFTMAX_SCALE, **extra)
    kv = 2 * num_seqs * seq_len * NUM_KV_HEADS * HEAD_DIM * 2
    qo = 2 * q.numel() * 2
    # Causal: query at position p sees p + 1 keys; 2 matmuls x 2 flops per multiply-add.
    prefix = seq_len - q_len
    keys_seen = num_seqs * (q_len * prefix + q_len * (q_len + 1) // 2)
    flops = 4 * keys_seen * NUM_Q_HEADS * HEAD_DIM
    run_and_record(benchmark, fn, kv + qo, group=f"prefill-s{num_seqs}-len{seq_len}-q{q_len}",
                   layout=layout, flops=flops)


@pytest.mark.parametrize("kv_dtype", list(KV_DTYPES))
def test_kv_write(benchmark, kv_dtype):
    """Scatter WRITE_TOKENS new tokens' bf16 K/V into random slots of a cache twice as big."""
    dtype = KV_DTYPES[kv_dtype]
    num_slots = 2 * WRITE_TOKENS
    k_cache = torch.zeros(num_slots, NUM_KV_HEADS, HEAD_DIM, device=DEVICE, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    k = torch.randn(WRITE_TOKENS, NUM_KV_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    slots = torch.randperm(num_slots, device=DEVICE)[:WRITE_TOKENS]
    k_scale, v_scale = _scales(kv_dtype)

    def fn():
        OPS.write_kv(k, v, k_cache, v_cache, slots, k_scale, v_scale)

    bytes_moved = 2 * k.numel() * (2 + _elem(dtype))
    run_and_record(benchmark, fn, bytes_moved, group="kv-write", kv_dtype=kv_dtype,
                   tokens=WRITE_TOKENS)


def test_copy_bandwidth(benchmark):
    """A plain device copy (read + write): the achievable-bandwidth yardstick."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=DEVICE).random_(0, 255)
    dst = torch.empty_like(src)
    run_and_record(benchmark, lambda: dst.copy_(src), 2 * COPY_BYTES, group="copy-bandwidth")
