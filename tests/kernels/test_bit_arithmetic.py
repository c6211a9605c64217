"""The kernels' integer bit tricks, mirrored in torch on the CPU and run in the kernels.

- `cast_rne` (float32 -> bfloat16, round to nearest even on the bits) must keep NaN: CUDA's
  canonical NaN 0x7FFFFFFF carried into the sign bit before the fix and became -0.0.
- `e4m3_bits_to_fp16` reads an fp8 cache through uint8 on every GPU (sm_80 has no e4m3 type):
  the bits moved into float16's fields are the e4m3 value times 2^-8, subnormals included.
- Per-step arguments (block-table width, split count, batch size, the packed step inputs'
  offsets) do not change the compiled variant: every launch of a run is one `precompile` built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kvbench.kernels import reference as ref

pytest.importorskip("triton")

from kvbench.kernels import triton_ops as tri  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
U32 = 0xFFFFFFFF
CUDA_NAN_BITS = 0x7FFFFFFF


def _signed(value: int, width: int) -> int:
    return value - (1 << width) if value >= 1 << (width - 1) else value


def _floats_from_bits(bits: list[int]) -> torch.Tensor:
    return torch.tensor([_signed(b, 32) for b in bits], dtype=torch.int32).view(torch.float32)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32).to(torch.int64) & U32


def old_rne_bits(bits: torch.Tensor) -> torch.Tensor:
    """The kernel's float32 -> bfloat16 rounding before the fix, in uint32 arithmetic."""
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & U32) & 0xFFFF0000


def rne_bits(x: torch.Tensor) -> torch.Tensor:
    """`cast_rne`'s integer steps, step for step (uint32 wrap-around as on the GPU)."""
    bits = _bits(x)
    rounded = old_rne_bits(bits)
    return torch.where(x != x, (bits | 0x00400000) & 0xFFFF0000, rounded)


def _as_bf16(bits32: torch.Tensor) -> torch.Tensor:
    top = bits32 >> 16
    return torch.where(top >= 1 << 15, top - (1 << 16), top).to(torch.int16).view(torch.bfloat16)


def test_old_rounding_turned_cuda_nan_into_negative_zero():
    bits = torch.tensor([CUDA_NAN_BITS])
    assert int(old_rne_bits(bits)) == 0x80000000  # the defect the fix removes


def test_rne_bits_keep_nan_and_match_torch_rounding():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * torch.logspace(-30, 30, 4096)
    nans = _floats_from_bits([CUDA_NAN_BITS, 0x7FC00000, 0xFFFFFFFF, 0x7F800001, 0xFF812345])
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 3.4e38, -3.4e38])
    x = torch.cat([x, nans, specials])
    got = _as_bf16(rne_bits(x))
    want = x.to(torch.bfloat16)
    assert torch.isnan(got[torch.isnan(x)]).all()
    assert torch.equal(got[~torch.isnan(x)].view(torch.int16), want[~torch.isnan(x)].view(torch.int16))


def test_cast_rne_keeps_nan_in_kernels():
    """CUDA's NaN bit pattern through the kernels' bf16 rounding: the float32 -> bf16 KV write
    and bf16 attention outputs (in the interpreter the same integer steps run)."""
    x = torch.randn(4, 1, 16)
    x.view(-1)[[0, 5, 17]] = _floats_from_bits([CUDA_NAN_BITS, 0xFFFFFFFF, 0x7FC00000])
    k_cache = torch.zeros(4, 1, 16, dtype=torch.bfloat16, device=DEVICE)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.arange(4, device=DEVICE)
    tri.write_kv(x.to(DEVICE), x.to(DEVICE), k_cache, v_cache, slots)
    got = k_cache.float().cpu().view(-1)
    assert torch.isnan(got[[0, 5, 17]]).all()
    assert torch.equal(torch.isnan(got), torch.isnan(x.view(-1)))
    # Attention: a NaN value row reaches every output of its KV head.
    v = torch.randn(8, 1, 16, dtype=torch.bfloat16)
    v[3, 0, 2] = float("nan")
    q = torch.randn(1, 2, 16, dtype=torch.bfloat16, device=DEVICE)
    out = tri.contiguous_decode_attention(q, v.to(DEVICE), v.to(DEVICE),
                                          torch.tensor([0], device=DEVICE),
                                          torch.tensor([8], dtype=torch.int32, device=DEVICE),
                                          0.25, num_splits=1)
    assert torch.isnan(out.float()).any()


def e4m3_to_fp16_scaled(codes: torch.Tensor) -> torch.Tensor:
    """`e4m3_bits_to_fp16`'s integer steps in torch (uint16 as int32, then float16 bits)."""
    c = codes.to(torch.int32)
    bits = ((c & 0x80) << 8) | ((c & 0x7F) << 7)
    bits = torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16)
    x = bits.view(torch.float16).float()
    return torch.where((c & 0x7F) == 0x7F, float("nan"), x)


def test_e4m3_bits_decode_every_code():
    codes = torch.arange(256, dtype=torch.uint8)
    want = codes.view(ref.FP8_DTYPE).float()
    got = e4m3_to_fp16_scaled(codes) * 256.0
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    finite = ~torch.isnan(want)
    assert torch.equal(got[finite], want[finite])  # exact, subnormals and -0.0 included
    assert torch.equal(torch.signbit(got[finite]), torch.signbit(want[finite]))


def test_fp8_attention_reads_every_code_exactly():
    """Keys and values covering all finite e4m3 codes, decoded in the kernel, against the
    reference dequantization (the kernel's only fp8 read path, on every architecture)."""
    codes = torch.arange(256, dtype=torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # no NaN
    cache = codes[torch.randperm(codes.numel(), generator=torch.Generator().manual_seed(1))]
    cache = cache[:240].reshape(15, 1, 16).view(ref.FP8_DTYPE)
    q = torch.randn(1, 1, 16, generator=torch.Generator().manual_seed(2)) / 64
    args = (torch.tensor([0]), torch.tensor([15], dtype=torch.int32), 0.25, 0.5, 0.25)
    want = ref.contiguous_decode_attention(q, cache, cache, *args)
    dev = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    got = tri.contiguous_decode_attention(q.to(DEVICE), cache.to(DEVICE), cache.to(DEVICE), *dev,
                                          num_splits=1)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


SPECIALIZATION_SCRIPT = textwrap.dedent("""
    import json
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from kvbench.core.layout import KVLayout
    from kvbench.core.step_batch import StepBatch
    from kvbench.execution.step_inputs import StepInputs
    from kvbench.kernels import aot
    from kvbench.kernels.aot_matrix import matrix
    from kvbench.kernels.triton_ops import (Target, decode_launches, prefill_launches,
                                            write_kv_launches)
    from kvbench.kernels.variants import shape_launches

    backend = make_backend(GPUTarget("cuda", 90, 32))
    target = Target(arch=90, sms=132)
    cpu = torch.device("cpu")

    def key(launch):
        _, sig, const, attrs = aot._specialize(launch, backend)
        return (launch.kernel.fn.__name__, repr(sig), repr(const), repr(attrs))

    def step_batch(num_prefill, prefill_len, num_decode, width, paged, bs):
        # Prefills first, then decodes of `width` blocks each, as the scheduler orders them.
        query_lens = [prefill_len] * num_prefill + [1] * num_decode
        seq_lens = [prefill_len] * num_prefill + [width * bs] * num_decode
        tables = [[i * width + j for j in range(width)] for i in range(len(seq_lens))]
        starts = [i * width * bs for i in range(len(seq_lens))]
        slots, positions = [], []
        for i, (q_len, s_len) in enumerate(zip(query_lens, seq_lens)):
            for pos in range(s_len - q_len, s_len):
                positions.append(pos)
                slots.append(tables[i][pos // bs] * bs + pos % bs if paged else starts[i] + pos)
        layout = KVLayout(kind="paged" if paged else "contiguous", slot_mapping=slots,
                          query_lens=query_lens, seq_lens=seq_lens, block_size=bs if paged else 1,
                          block_tables=tables if paged else [], start_slots=[] if paged else starts)
        ends = [sum(query_lens[: i + 1]) - 1 for i in range(len(query_lens))]
        return StepBatch(input_ids=[0] * len(slots), positions=positions, layout=layout,
                         num_prefill_seqs=num_prefill, sample_rows=ends)

    # What the model executor launches for one step, from the real packed step inputs.
    def step_launches(shape, inputs, k_cache, scales, paged, num_prefill, num_decode, width,
                      splits):
        bs = shape.block_size
        batch = step_batch(num_prefill, 3, num_decode, width, paged, bs)
        idx = inputs.build(batch)
        p, pt = idx.num_prefill_seqs, idx.num_prefill_tokens
        tokens = batch.num_tokens
        q = torch.zeros(tokens, shape.num_q_heads, shape.head_dim, dtype=shape.dtype)
        kv = torch.zeros(tokens, shape.num_kv_heads, shape.head_dim, dtype=shape.dtype)
        table = idx.tables if paged else idx.start_slots
        launches = write_kv_launches(kv, kv, k_cache, k_cache, idx.slot_mapping, *scales,
                                     target=target)
        if p:
            launches += prefill_launches(q[:pt], k_cache, k_cache, table[:p], paged,
                                         idx.query_start_loc, idx.seq_lens[:p],
                                         bs if paged else 1, 0.1, *scales, max_query_len=3,
                                         target=target)[1]
        launches += decode_launches(q[pt:], k_cache, k_cache, table[p:], paged,
                                    idx.seq_lens[p:], bs if paged else 1, 0.1, *scales,
                                    num_splits=splits, target=target)[1]
        return launches

    # (prefill sequences, decode sequences): odd and even batches, 0-3 prefills ahead.
    combos = [(p, d) for p in range(4) for d in range(1, 9)]
    extra = {}
    for case in ("qbf16-kvbf16-d128-g4", "qfp16-kvfp8-per_head-d64-g1"):
        shape = matrix()[case]
        warmed = {key(launch) for _, launch in shape_launches(shape, cpu, target=target)}
        k_cache = torch.zeros(64 * 16 * 16, shape.num_kv_heads, shape.head_dim).to(
            shape.cache_dtype)
        scales = (torch.full((shape.num_kv_heads,), 0.05),) * 2 if shape.scale_kind != "none" \
            else (None, None)
        for paged in (True, False):
            inputs = StepInputs(cpu)
            for splits in range(1, 65):
                num_prefill, num_decode = combos[splits % len(combos)]
                width = 1 + splits % 17
                for launch in step_launches(shape, inputs, k_cache, scales, paged, num_prefill,
                                            num_decode, width, splits):
                    k = key(launch)
                    if k not in warmed:
                        extra.setdefault(k[0], []).append(
                            dict(case=case, paged=paged, splits=splits,
                                 prefill=num_prefill, decode=num_decode))
    print(json.dumps({name: runs[:3] + [len(runs)] for name, runs in extra.items()}))
""")


def test_per_step_arguments_do_not_make_new_variants():
    """Every split count 1-64, block-table widths 1-17, odd and even decode batches behind 0-3
    prefill sequences, through the real packed step inputs (`StepInputs`), paged and
    contiguous, 16-bit and fp8 caches: every launch is one of the variants `precompile` builds
    (Triton's own JIT specialization for sm_90, computed without a GPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", SPECIALIZATION_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    compiled_mid_run = json.loads(proc.stdout)
    assert compiled_mid_run == {}, compiled_mid_run


VARIANT_SPECIALIZATION_SCRIPT = textwrap.dedent("""
    import json
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from kvbench.kernels import aot
    from kvbench.kernels.aot_matrix import matrix
    from kvbench.kernels.triton_ops import Target, decode_launches, prefill_launches
    from kvbench.kernels.variants import shape_launches

    backend = make_backend(GPUTarget("cuda", 90, 32))
    target = Target(arch=90, sms=132)
    cpu = torch.device("cpu")

    def key(launch):
        _, sig, const, attrs = aot._specialize(launch, backend)
        return (launch.kernel.fn.__name__, repr(sig), repr(const), repr(attrs))

    extra = []
    for case in ("gemma2-qbf16-kvbf16-d128-g2-softcap", "gptoss-qbf16-kvfp8-scalar-d64-g8-sinks"):
        shape = matrix()[case]
        warmed = {key(launch) for _, launch in shape_launches(shape, cpu, target=target)}
        hq, d = shape.num_q_heads, shape.head_dim
        k_cache = torch.zeros(64 * 16, shape.num_kv_heads, d).to(shape.cache_dtype)
        scales = (0.05, 0.05) if shape.scale_kind != "none" else (None, None)
        # One tensor-parallel rank's sinks: a slice 4 bytes into a larger tensor.
        sinks = torch.zeros(2 * hq + 1)[1:hq + 1] if shape.sinks else None
        tables = torch.arange(16, dtype=torch.int32).reshape(2, 8)
        seq_lens = torch.tensor([100, 37], dtype=torch.int32)
        qsl = torch.tensor([0, 3, 6], dtype=torch.int32)
        for window in (None, 1, 17, 32, 4096):
            for cap in ((30.0, 50.0) if shape.softcap else (None,)):
                kw = dict(sliding_window=window, softcap=cap, sinks=sinks, target=target)
                for splits in (1, 7):
                    launches = decode_launches(torch.zeros(2, hq, d, dtype=shape.dtype), k_cache,
                                               k_cache, tables, True, seq_lens, 16, 0.1, *scales,
                                               num_splits=splits, **kw)[1]
                    launches += prefill_launches(torch.zeros(6, hq, d, dtype=shape.dtype),
                                                 k_cache, k_cache, tables, True, qsl, seq_lens,
                                                 16, 0.1, *scales, max_query_len=3, **kw)[1]
                    extra += [dict(case=case, window=window, cap=cap, splits=splits,
                                   kernel=launch.kernel.fn.__name__)
                              for launch in launches if key(launch) not in warmed]
                    if window is None:
                        continue
                    # `contiguous`'s rings: start slots and lengths sliced out of a group's
                    # [S, 2] table behind 0-2 prefill rows, as the executor passes them.
                    for skip in range(3):
                        table = torch.arange(2 * (2 + skip), dtype=torch.int32).reshape(-1, 2)
                        lens = torch.tensor([5, 100, 37, 9][: 2 + skip], dtype=torch.int32)
                        ring = dict(kw, ring_lens=table[skip:, 1])
                        launches = decode_launches(
                            torch.zeros(2, hq, d, dtype=shape.dtype), k_cache, k_cache,
                            table[skip:, 0], False, lens[skip:], 1, 0.1, *scales,
                            num_splits=splits, **ring)[1]
                        launches += prefill_launches(
                            torch.zeros(6, hq, d, dtype=shape.dtype), k_cache, k_cache,
                            table[skip:, 0], False, qsl, lens[skip:], 1, 0.1, *scales,
                            max_query_len=3, **ring)[1]
                        extra += [dict(case=case, window=window, ring=skip, splits=splits,
                                       kernel=launch.kernel.fn.__name__)
                                  for launch in launches if key(launch) not in warmed]
    print(json.dumps(extra[:5]))
""")


def test_window_lengths_caps_and_sink_slices_do_not_make_new_variants():
    """A window length (1, 17, 4096), a soft cap's value and a misaligned sinks slice are
    runtime arguments, and so are `contiguous`'s ring tables behind any number of prefill
    rows: every launch is one of the variants `precompile` builds for the shape."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", VARIANT_SPECIALIZATION_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []
