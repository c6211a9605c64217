"""Ring-addressed contiguous attention (`ring_lens`: a window group's ring under `contiguous`,
position p of sequence i at `start_slots[i] + p % ring_lens[i]`), reference and Triton, against
a naive per-query PyTorch loop over the logical positions; the torch backend's kernels
(`cpu_attention`) too.

The slots outside the rings hold NaN, so reading one poisons the output; the ring slots that
hold no visible key (tokens that left the window, slots not yet written) hold large finite
garbage, which a kernel may read for padding it masks (the reference gathers whole spans) but
which changes the output if it is attended. Triton runs in its CPU interpreter off CUDA (tiny
shapes)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first import of triton

from kvbench.kernels import cpu_attention  # noqa: E402
from kvbench.kernels import reference as ref  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
HQ, HKV, D = 4, 2, 16
TOL = dict(rtol=1e-4, atol=1e-5)


class RingBatch:
    """Sequences of `seq_lens` whose last `q_lens` tokens are this step's, each in a ring of
    `ring_lens` slots at scattered starts, the logical K/V of every position kept apart."""

    def __init__(self, seed: int, seq_lens, q_lens, ring_lens, window: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32)
        self.q_lens = q_lens
        self.ring_lens = torch.tensor(ring_lens, dtype=torch.int32)
        self.window = window
        starts, at = [], 5
        for r in ring_lens:
            starts.append(at)
            at += r + 3  # gaps of NaN between rings
        self.start_slots = torch.tensor(starts, dtype=torch.int32)
        self.k_cache = torch.full((at, HKV, D), float("nan"))
        self.v_cache = torch.full((at, HKV, D), float("nan"))
        self.k_pos, self.v_pos = [], []  # [n, HKV, D] per sequence: position -> K/V
        for i, (n, c, r) in enumerate(zip(seq_lens, q_lens, ring_lens, strict=True)):
            k = torch.randn(n, HKV, D, generator=gen)
            v = torch.randn(n, HKV, D, generator=gen)
            self.k_pos.append(k)
            self.v_pos.append(v)
            first = max(0, n - c - window + 1)  # the first key any of this step's queries sees
            assert r >= n - first, "the ring must hold the window and the step's tokens"
            ring = slice(starts[i], starts[i] + r)
            self.k_cache[ring] = 50 * torch.randn(r, HKV, D, generator=gen)
            self.v_cache[ring] = 50 * torch.randn(r, HKV, D, generator=gen)
            for p in range(first, n):  # the visible keys, where the ring holds them
                self.k_cache[starts[i] + p % r] = k[p]
                self.v_cache[starts[i] + p % r] = v[p]
        q_total = sum(q_lens)
        self.q = torch.randn(q_total, HQ, D, generator=gen)
        self.query_start_loc = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(),
                                            dtype=torch.int32)
        self.scale = D**-0.5

    def naive(self) -> torch.Tensor:
        """Each query over the logical keys of its window, one softmax at a time."""
        out = torch.empty_like(self.q)
        group = HQ // HKV
        row = 0
        for i, (n, c) in enumerate(zip(self.seq_lens.tolist(), self.q_lens, strict=True)):
            for j in range(c):
                pos = n - c + j
                keys = range(max(0, pos - self.window + 1), pos + 1)
                for h in range(HQ):
                    k = self.k_pos[i][list(keys), h // group]
                    v = self.v_pos[i][list(keys), h // group]
                    p = torch.softmax(k @ self.q[row, h] * self.scale, dim=0)
                    out[row, h] = p @ v
                row += 1
        return out

    def to(self, device):
        for name in ("k_cache", "v_cache", "q", "start_slots", "ring_lens", "seq_lens",
                     "query_start_loc"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def decode_batch(seed: int = 0) -> RingBatch:
    # wrapped several times, wrapped inside the window's span, shorter than its ring
    return RingBatch(seed, seq_lens=[37, 12, 4], q_lens=[1, 1, 1], ring_lens=[7, 9, 6],
                     window=7)


def prefill_batch(seed: int = 1) -> RingBatch:
    # a chunk after a wrapped prefix, a whole prompt longer than the window, a chunk of one
    return RingBatch(seed, seq_lens=[29, 11, 20], q_lens=[6, 11, 1], ring_lens=[10, 11, 5],
                     window=5)


TORCH_MODULES = pytest.mark.parametrize("ops", [ref, cpu_attention],
                                        ids=["reference", "cpu_attention"])


@TORCH_MODULES
def test_reference_ring_decode_matches_the_naive_loop(ops):
    b = decode_batch()
    q = b.q
    got = ops.contiguous_decode_attention(q, b.k_cache, b.v_cache, b.start_slots, b.seq_lens,
                                          b.scale, sliding_window=b.window,
                                          ring_lens=b.ring_lens)
    torch.testing.assert_close(got, b.naive(), **TOL)


@TORCH_MODULES
def test_reference_ring_prefill_matches_the_naive_loop(ops):
    b = prefill_batch()
    got = ops.contiguous_attention(b.q, b.k_cache, b.v_cache, b.start_slots,
                                   b.query_start_loc, b.seq_lens, b.scale,
                                   sliding_window=b.window, ring_lens=b.ring_lens)
    torch.testing.assert_close(got, b.naive(), **TOL)


def test_reference_without_the_ring_reads_the_poisoned_slots():
    """The test is not vacuous: ignoring the ring reads NaN or another position's keys (the
    torch backend, which clamps its padding's reads to the arena), or past the arena's end
    (the reference, which refuses)."""
    b = decode_batch()
    args = (b.q, b.k_cache, b.v_cache, b.start_slots, b.seq_lens, b.scale)
    got = cpu_attention.contiguous_decode_attention(*args, sliding_window=b.window)
    assert not torch.allclose(got, b.naive(), equal_nan=False)
    with pytest.raises(IndexError):
        ref.contiguous_decode_attention(*args, sliding_window=b.window)


@pytest.mark.parametrize("num_splits", [1, 2])
def test_triton_ring_decode_matches_the_naive_loop(num_splits):
    pytest.importorskip("triton")
    from kvbench.kernels import triton_ops as tri

    b = decode_batch().to(DEVICE)
    got = tri.contiguous_decode_attention(b.q, b.k_cache, b.v_cache, b.start_slots,
                                          b.seq_lens, b.scale, sliding_window=b.window,
                                          ring_lens=b.ring_lens, num_splits=num_splits,
                                          block_n=16)
    torch.testing.assert_close(got.cpu(), b.to("cpu").naive(), **TOL)


def test_triton_ring_prefill_matches_the_naive_loop():
    pytest.importorskip("triton")
    from kvbench.kernels import triton_ops as tri

    b = prefill_batch().to(DEVICE)
    got = tri.contiguous_attention(b.q, b.k_cache, b.v_cache, b.start_slots,
                                   b.query_start_loc, b.seq_lens, b.scale,
                                   sliding_window=b.window, ring_lens=b.ring_lens,
                                   block_m=16, block_n=16)
    torch.testing.assert_close(got.cpu(), b.to("cpu").naive(), **TOL)


def test_triton_refuses_a_ring_on_a_paged_cache():
    pytest.importorskip("triton")
    from kvbench.kernels import triton_ops as tri

    b = decode_batch().to(DEVICE)
    with pytest.raises(ValueError, match="contiguous"):
        tri.decode_launches(b.q, b.k_cache, b.v_cache, b.start_slots[:, None], True,
                            b.seq_lens, 1, b.scale, ring_lens=b.ring_lens)


def test_windowed_shapes_precompile_the_ring_variant():
    """A windowed layer under `contiguous` reads through a ring: every windowed case of the
    ahead-of-time matrix makes its decode (with and without split-K) and prefill launches with
    ``RING`` (what `precompile` builds and tests/kernels/test_aot_compile.py compiles for
    sm_80 and sm_90), and no full-attention layer does."""
    pytest.importorskip("triton")
    from kvbench.kernels.aot_matrix import matrix
    from kvbench.kernels.triton_ops import Target
    from kvbench.kernels.variants import shape_launches

    cases = {case: shape for case, shape in matrix().items() if True in shape.window_kinds}
    assert cases
    for shape in cases.values():
        launches = shape_launches(shape, torch.device("cpu"), target=Target(arch=90, sms=132))
        ring = sorted(name for name, launch in launches if launch.constexprs.get("RING"))
        assert ring == ["decode-contiguous-ring-nosplit-window-_decode_kernel",
                        "decode-contiguous-ring-split-window-_decode_kernel",
                        "prefill-contiguous-ring-window"], ring
