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


def test_float32_operands_past_head_dim_128_get_smaller_prefill_tiles_on_sm80():
    # (their 32 x 32 tiles in two stages overflow sm_80's shared memory under Triton 3.8)
    widest = lc.choose(80, "prefill", 256, True)
    wide = lc.choose(80, "prefill", 256, False)
    assert widest.block_n < wide.block_n and widest.block_m <= wide.block_m
    assert lc.choose(80, "prefill", 128, True) == wide
    assert lc.choose(80, "decode", 256, True) == lc.choose(80, "decode", 256, False)


def test_choice_is_cached_per_shape_and_interpreter_uses_small_tiles():
    assert lc.choose(90, "decode", 128, False) is lc.choose(90, "decode", 128, False)
    assert lc.choose(None, "prefill", 128, False) == lc.INTERPRETER
    with pytest.raises(ValueError, match="unknown kernel kind"):
        lc.choose(90, "encode", 128, False)
