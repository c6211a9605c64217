"""The runner: interruption, repeats, closed loop, arrivals on the clock, clipping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.results.repeat import mean_ci95
from kvbench.results.run_folder import is_whole

SMALL = ["--warmup", "0", "--kv-memory", "8MiB", "--quiet"]


def test_ctrl_c_keeps_a_marked_partial_result_and_exits_130(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kvbench.cli import main; sys.exit(main())",
         "run", "--workload", "sharegpt", "--num-requests", "2000", "--out", str(out),
         *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A shell's background job (`.ci/run &`, `nohup`) starts with SIGINT ignored, and a
        # child inherits that: Python then installs no KeyboardInterrupt handler. The user
        # this test stands for presses Ctrl-C at a terminal, where SIGINT is delivered.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    folder = None
    while time.time() < deadline and folder is None:
        time.sleep(0.5)
        folders = list(out.glob("*.partial/config.json")) if out.exists() else []
        folder = folders[0].parent if folders else None
    assert folder is not None, "run never started"
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    assert folder.name.endswith(".partial") and not is_whole(folder)  # kept, not renamed
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["completed"] < 2000
    requests = pd.read_csv(folder / "requests.csv")
    assert len(requests) >= summary["completed"]


def test_repeat_reports_mean_and_confidence_interval(tmp_path, capsys):
    assert main(["run", "--num-requests", "4", "--repeat", "2", "--json", "--out",
                 str(tmp_path), *SMALL[:-1]]) == 0
    data = json.loads(capsys.readouterr().out)
    (stats,) = data["repeats"]
    assert stats["repeats"] == 2
    assert stats["figures"]["output_tok_s"]["n"] == 2
    (root,) = list(tmp_path.iterdir())
    assert (root / "rep-1" / "kvbench_summary.json").is_file() and (root / "rep-2").is_dir()
    assert (root / "repeat.json").is_file()


def test_mean_ci95_uses_student_t():
    stats = mean_ci95([1.0, 2.0, 3.0])
    assert stats["mean"] == 2.0
    assert stats["ci95"] == pytest.approx(4.303 * 1.0 / 3**0.5, rel=1e-3)


def test_closed_loop_never_exceeds_max_concurrency(tmp_path, capsys):
    assert main(["run", "--workload", "uniform", "--num-requests", "8", "--max-concurrency",
                 "2", "--out", str(tmp_path), "--workload-param", "prompt_len=16",
                 "--workload-param", "output_len=8", *SMALL]) == 0
    folder = capsys.readouterr().out.strip()
    steps = pd.read_csv(os.path.join(folder, "steps.csv"))
    assert (steps["num_running"] + steps["num_waiting"]).max() <= 2


def test_arrivals_are_replayed_on_the_clock(tmp_path, capsys):
    assert main(["run", "--workload", "uniform", "--num-requests", "6", "--request-rate", "20",
                 "--out", str(tmp_path), "--workload-param", "prompt_len=8",
                 "--workload-param", "output_len=4", *SMALL]) == 0
    folder = capsys.readouterr().out.strip()
    requests = pd.read_csv(os.path.join(folder, "requests.csv"))
    assert requests["arrival_s"].max() > 0
    # nobody is admitted before it arrives
    assert (requests["admitted_s"] >= requests["arrival_s"] - 1e-9).all()


def test_clipped_requests_are_counted_with_a_warning(tmp_path, capsys):
    assert main(["run", "--workload", "uniform", "--num-requests", "3", "--max-model-len", "64",
                 "--workload-param", "prompt_len=60", "--workload-param", "output_len=20",
                 "--out", str(tmp_path), "--warmup", "0", "--kv-memory", "8MiB"]) == 0
    captured = capsys.readouterr()
    assert "3 of 3 requests" in captured.err or "clipped" in captured.err
