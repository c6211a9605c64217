"""The per-architecture launch table: looked up once per shape, families by capability."""

from __future__ import annotations

import pytest

from kvbench.kernels import launch_config as lc


def test_families_and_shared_memory_limits():
    assert lc.family(80) == "sm80"
    assert lc.family(86) == lc.family(89) == "sm86"  # L4, L40, RTX: 99 KB of shared memory
    assert lc.family(90) == lc.family(100) == "sm90"
    assert lc.max_shared_bytes(80) > lc.max_shared_bytes(86)  # A100 has more than consumer Ampere
    assert lc.max_shared_bytes(89) == lc.max_shared_bytes(86)
    assert lc.max_shared_bytes(120) == lc.max_shared_bytes(90)


def test_wide_operands_get_smaller_tiles():
    for arch in (80, 86, 90):
        for kind in ("decode", "prefill"):
            narrow = lc.choose(arch, kind, 128, False)
            assert lc.choose(arch, kind, 256, False) == lc.choose(arch, kind, 64, True)
            wide = lc.choose(arch, kind, 256, False)
            assert wide.block_n <= narrow.block_n and wide.block_m <= narrow.block_m


def test_float32_operands_past_head_dim_128_get_the_smallest_tiles_and_chunked_rows():
    # A whole 256-column float32 row is too many registers as a tl.dot operand: 16-row tiles,
    # eight warps, q @ k.T in chunks (and on sm_80 a smaller prefill tile than the 32 x 32 one
    # that overflowed its shared memory under Triton 3.8).
    for arch in (80, 86, 90):
        for kind in ("decode", "prefill"):
            widest = lc.choose(arch, kind, 256, True)
            wide = lc.choose(arch, kind, 256, False)
            assert widest.block_m == 16 and widest.num_warps == 8
            assert widest.head_chunk(256) < 256 and wide.head_chunk(256) == 256
            assert widest.block_m * widest.block_n <= wide.block_m * wide.block_n
            assert lc.choose(arch, kind, 128, True).head_chunk(128) == 128
    assert lc.choose(80, "prefill", 256, True).block_m * lc.choose(80, "prefill", 256, True).block_n < 32 * 32
    assert lc.choose(80, "decode", 256, True).block_n == lc.choose(80, "decode", 256, False).block_n


def test_head_chunk_divides_the_padded_row():
    assert lc.LaunchConfig(16, 32, 8, 2, block_dk=64).head_chunk(256) == 64
    assert lc.LaunchConfig(16, 32, 8, 2, block_dk=64).head_chunk(32) == 32  # never wider
    assert lc.LaunchConfig(16, 32, 4, 2).head_chunk(256) == 256  # unset: the whole row
    assert lc.INTERPRETER.head_chunk(256) < 256  # the interpreter tests exercise chunks


def test_choice_is_cached_per_shape_and_interpreter_uses_small_tiles():
    assert lc.choose(90, "decode", 128, False) is lc.choose(90, "decode", 128, False)
    assert lc.choose(None, "prefill", 128, False) == lc.INTERPRETER
    with pytest.raises(ValueError, match="unknown kernel kind"):
        lc.choose(90, "encode", 128, False)
