"""Sweep grids from TOML files and flags, point ids, SLO targets, the Pareto front."""

from __future__ import annotations

import math
import sys

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.strategies import STRATEGIES
from kvbench.sweep import SweepSpec, load_sweep_config, metric_column
from kvbench.sweep.executor import make_executor
from kvbench.sweep.grid import expand_grid, point_id
from kvbench.sweep.report import pareto_front
from kvbench.sweep.slo import meets_slo, parse_slo_targets, per_request_slo, slo_violations

TOML = """
kind = "simulate"

[base]
model = "llama-2-13b"
gpu = "h100-80gb"
workload = "uniform"
num-requests = 8
workload-param = ["prompt_len=32"]

[axes]
strategy = ["contiguous", "paged"]
request-rate = [1, 2.5, "inf"]
"workload_param.output_len" = [16, 64]
reserve = ["max", "pow2"]

[slo]
"ttft.p99" = "500ms"
tpot = 50

[search]
axis = "request-rate"
range = [0.5, 16]
tolerance = 0.1

[report]
pareto = ["output_tok_s", "e2e.p99"]
heatmap = ["request_rate", "output_len"]

[executor]
kind = "local"
jobs = 1
"""


def test_toml_grid_is_the_cartesian_product_with_duplicates_merged(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(TOML)
    spec = load_sweep_config(path).normalize().check()
    assert spec.name == "fleet" and spec.kind == "simulate"
    assert list(spec.axes) == ["strategy", "request_rate", "workload_param.output_len",
                               "reserve"]
    assert spec.axes["request_rate"] == ["1", "2.5", "inf"]
    assert spec.base["num_requests"] == 8
    assert spec.slo == {"ttft.p99": 500.0, "tpot.p99": 50.0}
    assert (spec.search.axis, spec.search.lo, spec.search.hi) == ("request_rate", 0.5, 16)
    points = expand_grid(spec)
    # paged reserves nothing: its reserve=max and reserve=pow2 points are the same run.
    assert len(points) == 3 * 2 * 2 + 3 * 2 == 18
    first = points[0]
    assert first.point_id == "strategy=contiguous,request_rate=1,output_len=16,reserve=max"
    assert points[1].run.engine.reserve == "pow2" and not first.duplicates
    paged = [p for p in points if p.values["strategy"] == "paged"]
    assert paged[0].duplicates == ["strategy=paged,request_rate=1,output_len=16,reserve=pow2"]
    assert first.run.workload.params == {"prompt_len": 32, "output_len": 16}
    assert first.run.executor.kind is EngineKind.SIMULATED
    assert first.run.executor.gpu == "h100-80gb"
    assert first.run.replay.slo_ms == {"ttft": 500.0, "tpot": 50.0}
    assert math.isinf(points[2 * 2 * 2].run.replay.request_rate)


def test_point_ids_are_readable_stable_and_safe():
    assert point_id({}) == "base"
    assert point_id({"strategy": "paged", "request_rate": 4.0}) == "strategy=paged,request_rate=4"
    assert point_id({"workload": "traces/day 1.jsonl"}) == "workload=traces_day_1.jsonl"
    long = point_id({"model": "x" * 400})
    assert len(long) <= 150 and long == point_id({"model": "x" * 400})


def test_flags_make_axes_and_dry_run_lists_points(capsys):
    code = main(["sweep", "--strategy", "all", "--request-rate", "1,4", "--block-size", "32",
                 "--axis", "workload_param.prompt_len=16;64", "--workload", "uniform",
                 "--dry-run"])
    assert code == 0
    lines = capsys.readouterr().out.split()
    assert len(lines) == len(STRATEGIES.names()) * 2 * 2
    assert lines[0] == "strategy=contiguous,request_rate=1,prompt_len=16"


@pytest.mark.parametrize("args, message", [
    (["--axis", "colour=red,blue"], "unknown run option 'colour'"),
    (["--simulate", "--device", "cpu"], "--device is an option of `kvbench run`"),
    (["--gpu", "h100-80gb", "--engine", "hf"], "--engine is an option of `kvbench run`"),
    (["--search", "request-rate"], "--search needs an --slo"),
    (["--slo", "ttft.p42=1s"], "unknown SLO metric"),
    (["--block-size", "16,24"], "--block-size must be a power of two"),
    (["--strategy", "paged,nope"], "nope"),
    (["--batching", "continuous,eager"], "unknown --batching 'eager'"),
    (["--batching", "sjf"], "use --queue-order sjf"),
    (["--queue-order", "fcfs,lifo"], "unknown --queue-order 'lifo'"),
    (["--resume"], "--resume needs the sweep's --name"),
    (["--pareto", "output_tok_s,foo"], "--pareto: unknown metric 'foo' (valid: completed,"),
    (["--heatmap-metrics", "tpot.p99,bar"], "--heatmap-metrics: unknown metric 'bar'"),
    (["--strategy", "paged,contiguous", "--heatmap", "strategy,colour"],
     "--heatmap: 'colour' is not an axis of this sweep (axes: strategy)"),
    # a bisection to a zero-width bracket never ends: 0 is refused like -1
    (["--search", "request-rate", "--slo", "ttft.p99=1s", "--tolerance", "0"],
     "--tolerance must be in (0, 1), got 0"),
    (["--search", "request-rate", "--slo", "ttft.p99=1s", "--tolerance", "-1"],
     "--tolerance must be in (0, 1), got -1"),
    (["--tolerance", "0"], "--tolerance need --search AXIS"),
])
def test_bad_grids_exit_2_with_one_line(args, message, capsys, tmp_path):
    # Every error is found before anything runs (--resume's only when the folder is chosen).
    dry = [] if "--resume" in args else ["--dry-run"]
    assert main(["sweep", *dry, "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())


def test_slo_targets_and_checks():
    targets = parse_slo_targets("ttft.p99=0.5s,tpot=50,e2e.mean=2s")
    assert targets == {"ttft.p99": 500.0, "tpot.p99": 50.0, "e2e.mean": 2000.0}
    assert per_request_slo({"ttft.p50": 100.0, "ttft.p99": 300.0, "itl.p99": 5.0}) == {
        "ttft": 100.0}
    summary = {"status": "complete", "failed": 0,
               "latency_ms": {"ttft": {"p99": 400.0}, "tpot": {"p99": 60.0},
                              "e2e": {"mean": 1500.0}}}
    assert slo_violations(summary, targets) == ["tpot.p99 60.0 ms > 50 ms"]
    assert meets_slo(summary, {"ttft.p99": 400.0})
    assert not meets_slo({**summary, "failed": 1}, {"ttft.p99": 400.0})


def test_pareto_front_and_metric_names():
    frame = pd.DataFrame({"point_id": list("abcde"),
                          "output_tok_s": [100.0, 200.0, 150.0, 300.0, 300.0],
                          "tpot_p99_ms": [10.0, 20.0, 30.0, 40.0, 50.0]})
    front = pareto_front(frame, "output_tok_s", "tpot_p99_ms")
    assert list(front["point_id"]) == ["a", "b", "d"]  # c loses to b, e to d
    assert metric_column("tpot.p99") == "tpot_p99_ms"
    assert metric_column("throughput.output_tok_s") == "output_tok_s"


def test_ray_executor_without_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(KvbenchInputError, match=r"kvbench\[ray\]"):
        make_executor("ray")


def test_spec_round_trips_through_sweep_json():
    spec = SweepSpec(kind="simulate", base={"gpu": "l4"}, axes={"strategy": "all"},
                     slo={"e2e": "3s"}).normalize()
    again = SweepSpec.from_dict(spec.to_dict()).normalize()
    assert again.identity() == spec.identity()
