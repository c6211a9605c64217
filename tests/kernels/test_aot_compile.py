"""Ahead-of-time builds of every Triton kernel variant for A100 (sm_80), L4/L40/RTX (sm_86,
sm_89) and H100/H200 (sm_90).

No GPU needed: `kvbench.kernels.aot` compiles each launch the wrappers make (`aot_matrix`:
dtypes including fp8 caches with scalar and per-head scales, head dims 64/80/128/256, GQA
groups 1/4/8, paged and contiguous, split-K on and off; and for sm_80/sm_90 one model shape
per score variant, windowed and full layers, plus latent-attention decode) with the ptxas in
the Triton wheel and reads registers, local memory and shared memory from the cubin: every
launch fits the target's shared memory, and none spills registers on the 16-bit paths at
head_dim <= 128, at head_dim 256 (any operand width) or in latent-attention decode. The selected part of the
matrix is built once per run, in a subprocess (the interpreter must be off there) with a fresh
TRITON_CACHE_DIR; each (target, case) is one test, and ``-k`` narrows the builds as well as the
tests (``pytest -m aot -k sm90`` builds sm_90 only).

Run: ``pytest -m aot`` (about 670 compilations; see results/reference/README.md for timings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvbench.kernels.aot_matrix import case_archs, matrix

pytest.importorskip("triton")

pytestmark = pytest.mark.aot

PAIRS = [pytest.param(arch, case, id=f"sm{arch}-{case}")
         for case in matrix() for arch in case_archs(case)]


def _selected(session) -> tuple[list[int], list[str]]:
    """The targets and cases of the collected tests of this module."""
    params = [item.callspec.params for item in session.items
              if item.module.__name__ == __name__ and hasattr(item, "callspec")]
    return sorted({p["arch"] for p in params}), sorted({p["case"] for p in params})


@pytest.fixture(scope="session")
def builds(tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("aot")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(folder / "cache"), TRITON_DEFAULT_FP_FUSION="1")
    out = folder / "builds.json"
    archs, cases = _selected(request.session)
    command = [sys.executable, "-m", "kvbench.kernels.aot", "--json", str(out)]
    command += [f"--arch={a}" for a in archs] + [f"--case={c}" for c in cases]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if not out.exists():
        pytest.fail(f"the ahead-of-time build did not finish:\n{proc.stdout}\n{proc.stderr}")
    records = json.loads(out.read_text())
    by_key: dict[tuple[int, str], list[dict]] = {}
    for r in records:
        by_key.setdefault((r["arch"], r["case"]), []).append(r)
    return by_key


def _fmt(r: dict) -> str:
    return f"{r['launch']}: " + (r.get("error") or (
        f"{r['registers']} regs, {r['local_bytes']} B local, {r['shared_bytes']} B shared"))


def expected_launches(shape) -> int:
    """write_kv, then per layout: decode without and with split-K (+ merge) and prefill, for
    each kind of layer (full, windowed), and for windowed layers the contiguous ring layout
    (`contiguous` on a windowed model) too; latent attention has no Triton prefill."""
    if shape.kv_lora_rank is not None:
        return 1 + 2 * 3
    return 1 + len(shape.window_kinds) * 2 * 4 + (4 if True in shape.window_kinds else 0)



@pytest.mark.parametrize("arch,case", PAIRS)
def test_compiles_without_spills(builds, arch, case):
    records = builds.get((arch, case))
    assert records, f"no builds for sm{arch} {case}"
    assert len(records) == expected_launches(matrix()[case]), [r["launch"] for r in records]
    failed = [_fmt(r) for r in records if "error" in r]
    assert not failed, "\n".join(failed)
    over = [_fmt(r) for r in records if r["shared_bytes"] > r["shared_limit_bytes"]]
    assert not over, f"shared memory over sm{arch}'s limit:\n" + "\n".join(over)
    # No register spills on the production paths: 16-bit operands at head_dim <= 128, every
    # launch at head_dim 256 (Gemma-2/3, Qwen3-Next; float32 operands included) and latent
    # attention's decode.
    hot = [r for r in records if r["head_dim"] == 256 or "_mla_decode_kernel" in r["launch"]
           or (not r["fp32_operands"] and r["head_dim"] <= 128)]
    spilled = [_fmt(r) for r in hot if r["local_bytes"] > 0]
    assert not spilled, "register spills:\n" + "\n".join(spilled)
