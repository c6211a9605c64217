"""Gated DeltaNet on flash-linear-attention's kernels (the optional `kvbench[fla]` extra):
FLA's chunked and fused-recurrent delta rule, as kvbench calls them, against kvbench's PyTorch
reference (checks in fla_delta_rule_check.py). On CUDA they run in this process; on the CPU in
Triton's interpreter, in a subprocess. Without fla (as in CI) they skip; the reference runs
off CUDA whatever is installed."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from kvbench.models import gated_deltanet

ROOT = Path(__file__).resolve().parents[2]



def fla_installed() -> bool:
    """Whether the extra's distribution is installed (a leftover `fla` folder is not)."""
    try:
        importlib.metadata.version("fla-core")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_fla = pytest.mark.skipif(
    not fla_installed(), reason="flash-linear-attention is not installed (pip install 'kvbench[fla]')")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_cpu_tensors_run_the_reference():
    """Off CUDA the dispatch never reaches for fla, installed or not."""
    assert gated_deltanet.fla_kernels_for(torch.zeros(1)) is None


@needs_fla
def test_fla_kernels_match_the_reference_in_triton_interpreter():
    """Both kernels over two sequences of 5 and 3 tokens (varlen) and three of 1, from
    non-zero states, 2 key heads serving 4 value heads; then a layer's prefill of 7 and 3
    tokens and two decodes through FLA: outputs and states within 1e-5 of the reference."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "tests.models.fla_delta_rule_check"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.split("\n")[:3] == [
        "kernels [5, 3]: ok", "kernels [1, 1, 1]: ok", "layer: ok"]


@needs_fla
def test_an_fla_outside_the_checked_versions_is_not_used(monkeypatch):
    import fla

    monkeypatch.setattr(fla, "__version__", "0.7.0")
    gated_deltanet.fla_kernels.cache_clear()
    try:
        with pytest.warns(UserWarning, match="0.7.0 is not the 0.6.x"):
            assert gated_deltanet.fla_kernels() is None
    finally:
        gated_deltanet.fla_kernels.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.undo()
        assert gated_deltanet.fla_kernels() is not None


@pytest.mark.gpu
@needs_fla
@needs_cuda
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-2), (torch.bfloat16, 5e-2)])
def test_fla_kernels_match_the_reference_on_cuda(dtype, tol):
    """Qwen3-Next's head dims (128), sequences crossing FLA's 64-token chunks beside short
    ones, and a batch of decodes. FLA's float32 matmuls may run in TF32, and it rounds
    normalised q and k and its chunk intermediates to the input dtype, hence the tolerances
    (a transposed state or a wrong head mapping is off by the values' own size)."""
    from tests.models.fla_delta_rule_check import check_kernels

    for lengths in ([130, 7, 64, 1], [1, 1, 1, 1]):
        check_kernels("cuda", dtype, lengths, dk=128, dv=128, tol=tol)


@pytest.mark.gpu
@needs_fla
@needs_cuda
def test_layer_on_cuda_runs_fla_and_matches_the_cpu_reference():
    from tests.models.fla_delta_rule_check import check_layer

    assert gated_deltanet.fla_kernels_for(torch.zeros(1, device="cuda")) is not None
    check_layer("cuda", tol=1e-2)
