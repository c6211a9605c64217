"""The local executor: parallel processes agree with sequential; failed points are reported
and rerun by `--resume`; the sweep folder holds its table, report and point folders."""

from __future__ import annotations

import json

import pandas as pd

from kvbench.cli import main
from kvbench.results.run_folder import is_whole
from kvbench.sweep import SweepSpec, run_sweep
from kvbench.sweep.local import LocalExecutor


def sim_spec(out) -> SweepSpec:
    return SweepSpec(
        kind="simulate",
        base={"model": "llama-2-7b", "gpu": "a100-40gb", "workload": "sharegpt",
              "num-requests": 40, "warmup": 0},
        axes={"strategy": ["contiguous", "paged"], "request-rate": [2, 8]},
        slo={"ttft.p99": "1s"},
        out=str(out),
    )


def test_two_processes_give_the_sequential_table(tmp_path):
    one = run_sweep(sim_spec(tmp_path), tmp_path / "one", executor=LocalExecutor(1))
    two = run_sweep(sim_spec(tmp_path), tmp_path / "two", executor=LocalExecutor(2))
    # The simulator's clock is modelled: every column but the wall time must agree.
    pd.testing.assert_frame_equal(one.points.drop(columns="wall_s"),
                                  two.points.drop(columns="wall_s"))
    assert list(one.points["point_id"]) == [
        "strategy=contiguous,request_rate=2", "strategy=contiguous,request_rate=8",
        "strategy=paged,request_rate=2", "strategy=paged,request_rate=8",
    ]
    assert one.points["meets_slo"].dtype == bool
    assert "goodput_requests_s" in one.points  # the SLO reaches every run's summary
    report = (tmp_path / "one" / "report.html").read_text()
    assert report.count("<script") >= 2 and "Pareto front" in report
    assert "<script src" not in report  # plotly.js inlined, nothing fetched
    sweep = json.loads((tmp_path / "one" / "sweep.json").read_text())
    assert [p["point_id"] for p in sweep["points"]] == list(one.points["point_id"])


def test_failed_points_are_reported_and_rerun_by_resume(tmp_path, capsys):
    # 1MiB of KV holds too few llama-2-7b tokens (512 KiB each) for any sharegpt request:
    # those points fail while the others run.
    args = ["sweep", "--simulate", "--model", "llama-2-7b", "--gpu", "a100-40gb",
            "--workload", "sharegpt", "--num-requests", "10", "--warmup", "0",
            "--kv-memory", "1MiB,4GiB", "--strategy", "paged", "--out", str(tmp_path),
            "--name", "f"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "1 of 2 points failed (kv_memory=1MiB)" in err and "--resume" in err
    table = pd.read_csv(tmp_path / "f" / "points.csv").set_index("point_id")
    assert table.loc["kv_memory=1MiB", "status"] == "failed"
    assert isinstance(table.loc["kv_memory=1MiB", "error"], str)
    assert table.loc["kv_memory=4GiB", "status"] == "complete"
    kept = (tmp_path / "f" / "kv_memory=4GiB" / "kvbench_summary.json").stat().st_mtime_ns
    assert main([*args, "--resume"]) == 1  # the failed point runs (and fails) again
    assert "1 of 2 points failed" in capsys.readouterr().err
    assert (tmp_path / "f" / "kv_memory=4GiB" / "kvbench_summary.json").stat().st_mtime_ns == kept
    assert is_whole(tmp_path / "f" / "kv_memory=4GiB")
