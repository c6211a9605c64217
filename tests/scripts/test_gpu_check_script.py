"""scripts/gpu_check.sh on a machine without CUDA: one clear line, exit 2, nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_stops_at_once_without_cuda(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: error: ")
    assert "no CUDA device" in lines[0]
    assert not out.exists()  # stopped before any part ran


def test_gpu_check_needs_an_output_folder():
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "usage: scripts/gpu_check.sh OUTPUT_FOLDER" in proc.stderr
