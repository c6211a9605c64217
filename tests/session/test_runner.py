"""The runner: interruption, repeats, closed loop, arrivals on the clock, clipping."""

from __future__ import annotations

import json
import os
import signal

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.results.repeat import mean_ci95
from tests.session.interrupted_run import stop_once_started

SMALL = ["--warmup", "0", "--kv-memory", "8MiB", "--quiet"]


def test_ctrl_c_keeps_a_marked_partial_result_and_exits_130(tmp_path):
    code, summary = stop_once_started(
        ["run", "--workload", "sharegpt", "--num-requests", "2000", *SMALL],
        tmp_path / "out", signal.SIGINT)
    assert code == 130
    assert summary["completed"] < 2000


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
