"""scripts/gpu_check.sh: without CUDA one clear line, exit 2, nothing written; its dry run
runs every part (CUDA-only ones stubbed) within the limits a GPU slot gives it."""

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
    assert "usage: scripts/gpu_check.sh [--dry-run] OUTPUT_FOLDER" in proc.stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                    reason="needs bash and timeout")
def test_a_dry_run_of_the_whole_script_passes_in_eight_files_one_folder_deep(tmp_path):
    # Every part runs (the CUDA-only ones stubbed, saying so), so the script cannot rot.
    import json
    import tarfile

    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= 8
    assert all(len(p.relative_to(out).parts) <= 2 for p in out.rglob("*"))
    summary = (out / "summary.txt").read_text().splitlines()
    rows = [line.split() for line in summary[1:] if line.split()[0] in PARTS]
    assert [r[0] for r in rows] == PARTS and all(r[1] == "ok" for r in rows)
    assert sum(int(r[4]) for r in rows) <= 300  # the parts' limits fit the five minutes
    assert "dry run: CUDA-only parts stubbed" in "\n".join(summary)
    log = (out / "log.txt").read_text()
    assert "dry run: GPU-sized kernel tests needs CUDA: not run" in log
    probe = json.loads((out / "probe.json").read_text())
    assert {"load", "budget", "decode", "arenas"} <= set(probe)
    assert not any(a["arena_alive_after_release"] for a in probe["arenas"])
    with tarfile.open(out / "comparison.tar.gz") as packed:
        names = packed.getnames()
    assert any(n.endswith("/comparison.csv") for n in names)


PARTS = ["environment", "kernel-tests", "probe", "benchmarks", "comparison"]
