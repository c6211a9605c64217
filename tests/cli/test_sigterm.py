"""SIGTERM (`timeout`, a CI cancel, `docker stop`) stops a run as Ctrl-C does, exiting 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd

from kvbench.results.run_folder import is_whole


def test_sigterm_keeps_a_resumable_interrupted_result_and_exits_143(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kvbench.cli import main; sys.exit(main())",
         "simulate", "--model", "llama-2-13b", "--gpu", "a100-40gb", "--workload", "sharegpt",
         "--num-requests", "1000000", "--request-rate", "2", "--strategy", "paged",
         "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.time() + 120
    folder = None
    while time.time() < deadline and folder is None and proc.poll() is None:
        time.sleep(0.5)
        folders = list(out.glob("*.partial/config.json")) if out.exists() else []
        folder = folders[0].parent if folders else None
    assert folder is not None, "run never started"
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert "interrupted" in err and "Traceback" not in err
    assert folder.name.endswith(".partial") and not is_whole(folder)  # kept, not renamed
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert 0 < summary["completed"] < 1_000_000
    requests = pd.read_csv(folder / "requests.csv")
    assert len(requests) >= summary["completed"]
