"""Per-architecture launch choice for the Triton attention kernels: tile sizes, warps, stages.

A small table keyed by GPU family (compute capability), kernel kind and operand width, looked
up once per shape (``lru_cache``), never per step, so a run meets a fixed set of variants.
The entries are the ones the ahead-of-time build (``tests/kernels/test_aot_compile.py``) shows
compile within shared memory on sm_80, sm_86, sm_89 and sm_90, and without register spills for
16-bit operands at head_dim <= 128 and for every operand width at head_dim 256; wide rows
(float32 operands or head_dim > 128) trade tile size and warps for registers and shared memory,
and the widest (float32 at head_dim > 128) also take ``q @ k.T`` in head-dim chunks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchConfig:
    """One kernel launch's tuning: ``block_m`` query rows per program (prefill only),
    ``block_n`` K/V tokens per loop iteration, ``num_warps`` and ``num_stages``;
    ``block_dk``, the head-dim columns per ``q @ k.T`` chunk (None: the whole row at once)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    block_dk: int | None = None

    @property
    def options(self) -> dict[str, int]:
        """The launch options Triton takes."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}

    def head_chunk(self, block_d: int) -> int:
        """The ``BLOCK_DK`` constexpr of a row padded to ``block_d`` columns."""
        return min(block_d, self.block_dk or block_d)


# Used under TRITON_INTERPRET=1: small tiles so even tiny test contexts loop several times,
# and rows past 32 columns in chunks (head_dim 24 or 32: one chunk; 80: a partly and a wholly
# masked one).
INTERPRETER = LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=1, block_dk=32)

# (family, kind, wide) -> config. Families: "sm80" (A100: sm_80, 163 KB of shared memory per
# block), "sm86" (consumer Ampere and Ada: sm_86 to sm_89, L4, L40, RTX 3090/4090: 99 KB, so
# float32 rows at head_dim 256 need 16-token tiles; two-stage 16-bit decode at head_dim 64
# needs a stack there, three do not), "sm90" (Hopper and newer). Wide decode runs eight warps
# on sm80 and sm90: with four, the fp8-cache decode at head_dim 256 spilled 32 bytes on sm_90;
# there in three stages, as its 16-bit decode (in two, an fp16 decode at 256 took 8 bytes of
# local memory at 80 registers, an artefact of ptxas's --regAllocOptLevel=2 that Triton sets).
_TABLE: dict[tuple[str, str, bool], LaunchConfig] = {
    ("sm80", "decode", False): LaunchConfig(block_m=16, block_n=64, num_warps=4, num_stages=2),
    ("sm80", "decode", True): LaunchConfig(block_m=16, block_n=32, num_warps=8, num_stages=2),
    ("sm80", "prefill", False): LaunchConfig(block_m=64, block_n=32, num_warps=4, num_stages=2),
    ("sm80", "prefill", True): LaunchConfig(block_m=32, block_n=32, num_warps=4, num_stages=2),
    ("sm86", "decode", False): LaunchConfig(block_m=16, block_n=64, num_warps=4, num_stages=3),
    ("sm86", "decode", True): LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=2),
    ("sm86", "prefill", False): LaunchConfig(block_m=64, block_n=32, num_warps=4, num_stages=2),
    ("sm86", "prefill", True): LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=2),
    ("sm90", "decode", False): LaunchConfig(block_m=16, block_n=64, num_warps=4, num_stages=3),
    ("sm90", "decode", True): LaunchConfig(block_m=16, block_n=32, num_warps=8, num_stages=3),
    ("sm90", "prefill", False): LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=3),
    ("sm90", "prefill", True): LaunchConfig(block_m=32, block_n=32, num_warps=4, num_stages=2),
}
# Latent-attention decode (`triton_mla_decode`): block_m is the query heads per program; the
# rows are 512 + 64 wide whatever the model, so one entry per family and operand width. Eight
# warps: with four, the fp8 tile decode spills on sm_80 and sm_90.
for fam in ("sm80", "sm86", "sm90"):
    _TABLE[(fam, "mla_decode", False)] = LaunchConfig(16, 32, num_warps=8, num_stages=2)
    _TABLE[(fam, "mla_decode", True)] = LaunchConfig(16, 16, num_warps=8, num_stages=1)

# float32 operands at head_dim > 128, the widest rows: 16 query rows per program, eight warps
# and q @ k.T in 32-column chunks, so that no thread holds a whole 256-column float32 row of a
# `tl.dot` operand (128 registers; more split for 3xTF32). With the 16-bit entries' tiles, four
# warps and whole rows they spilled 8-568 bytes per thread on sm_80, sm_86 and sm_90; with
# 64-column chunks an fp8 cache still spilled 32-48 bytes on sm_90.
_FP32_WIDE: dict[tuple[str, str], LaunchConfig] = {
    (fam, kind): LaunchConfig(16, 16 if fam == "sm86" else 32, num_warps=8, num_stages=2,
                              block_dk=32)
    for fam in ("sm80", "sm86", "sm90") for kind in ("decode", "prefill")
}

# Largest dynamic shared memory one block may use, bytes (CUDA occupancy tables).
MAX_SHARED_BYTES = {80: 166912, 86: 101376, 89: 101376, 90: 232448}


def family(arch: int) -> str:
    """The table family of compute capability ``arch`` (e.g. 80, 86, 90)."""
    if arch >= 90:
        return "sm90"
    return "sm86" if arch >= 86 else "sm80"


def max_shared_bytes(arch: int) -> int:
    """Shared memory limit per block of compute capability ``arch``."""
    if arch in MAX_SHARED_BYTES:
        return MAX_SHARED_BYTES[arch]
    return MAX_SHARED_BYTES[90] if arch >= 90 else MAX_SHARED_BYTES[86]


@functools.lru_cache(maxsize=256)
def choose(arch: int | None, kind: str, head_dim: int, fp32_operands: bool) -> LaunchConfig:
    """The launch configuration for a ``kind`` ("decode", "prefill" or "mla_decode") kernel on
    ``arch`` (None: the CPU interpreter)."""
    if kind not in ("decode", "prefill", "mla_decode"):
        raise ValueError(f"unknown kernel kind {kind!r}")
    if arch is None:
        return INTERPRETER
    if kind == "mla_decode":
        return _TABLE[(family(arch), kind, fp32_operands)]
    if fp32_operands and head_dim > 128:
        return _FP32_WIDE[(family(arch), kind)]
    return _TABLE[(family(arch), kind, fp32_operands or head_dim > 128)]
