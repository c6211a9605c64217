"""A `kvbench` command stopped by a signal once its run has started: the shared steps of the
Ctrl-C and SIGTERM tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from kvbench.results.run_folder import is_whole


def stop_once_started(args: list[str], out: Path, sig: signal.Signals) -> tuple[int, dict[str, Any]]:
    """Run `kvbench ARGS --out OUT` in a subprocess, send `sig` two seconds after its working
    folder appears, and check what every interrupt leaves: one line saying interrupted, no
    traceback, the folder kept `.partial`, a summary that says `interrupted` and a
    `requests.csv` holding every request it counts. Returns the exit code and the summary."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kvbench.cli import main; sys.exit(main())",
         *args, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A shell's background job (`.ci/run &`, `nohup`) starts with SIGINT ignored, and a
        # child inherits that: Python then installs no KeyboardInterrupt handler. The user
        # these tests stand for presses Ctrl-C at a terminal, where SIGINT is delivered.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    folder = None
    while time.time() < deadline and folder is None and proc.poll() is None:
        time.sleep(0.5)
        folders = list(out.glob("*.partial/config.json")) if out.exists() else []
        folder = folders[0].parent if folders else None
    assert folder is not None, "run never started"
    time.sleep(2.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert "interrupted" in err and "Traceback" not in err
    assert folder.name.endswith(".partial") and not is_whole(folder)  # kept, not renamed
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["status"] == "interrupted"
    requests = pd.read_csv(folder / "requests.csv")
    assert len(requests) >= summary["completed"]
    return proc.returncode, summary
