"""scripts/benchmark_gate.py: the GPU workflow's gate holds a run to a baseline from the
same GPU model, fails on benchmarks only one side has, and on a slowdown past the limit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("benchmark_gate", ROOT / "scripts" /
                                               "benchmark_gate.py")
gate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gate)

H100 = "NVIDIA H100 80GB HBM3"


def bench_json(path: Path, gpu: str | None, mins: dict[str, float]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "machine_info": {"node": "runner", "gpu": gpu},
        "benchmarks": [{"fullname": name, "name": name.split("::")[-1],
                        "stats": {"min": m, "median": 1.2 * m, "mean": 1.3 * m}}
                       for name, m in mins.items()],
    }))
    return path


BASE = {"tests/benchmarks/test_kernel_benchmarks.py::test_decode[paged]": 100e-6,
        "tests/benchmarks/test_kernel_benchmarks.py::test_prefill[paged]": 400e-6}


@pytest.fixture
def committed(tmp_path):
    folder = tmp_path / "reference"
    bench_json(folder / "nvidia-h100-80gb-hbm3.json", H100, BASE)
    return folder


def run(tmp_path, committed, mins, gpu=H100, *extra):
    current = bench_json(tmp_path / "now.json", gpu, mins)
    return gate.main([str(current), "--baseline-dir", str(committed), *extra])


def test_within_the_limit_holds_and_a_slowdown_past_it_fails(tmp_path, committed, capsys):
    assert run(tmp_path, committed, {k: v * 1.09 for k, v in BASE.items()}) == 0
    slower = {**BASE, "tests/benchmarks/test_kernel_benchmarks.py::test_decode[paged]": 112e-6}
    assert run(tmp_path, committed, slower) == 1
    err = capsys.readouterr().err
    assert "test_decode[paged]: min +12.0%, more than +10%" in err
    assert "test_prefill" not in err
    assert run(tmp_path, committed, {k: v * 0.5 for k, v in BASE.items()}) == 0  # faster


@pytest.mark.parametrize("change", ["missing", "new"])
def test_a_benchmark_only_one_side_has_fails(tmp_path, committed, capsys, change):
    mins = dict(BASE)
    if change == "missing":
        mins.pop("tests/benchmarks/test_kernel_benchmarks.py::test_prefill[paged]")
    else:
        mins["tests/benchmarks/test_kernel_benchmarks.py::test_renamed[paged]"] = 1e-6
    assert run(tmp_path, committed, mins) == 1
    err = capsys.readouterr().err
    assert ("in the baseline, not in this run" if change == "missing"
            else "in this run, not in the baseline") in err


def test_the_baseline_must_come_from_the_same_gpu_model(tmp_path, committed, capsys):
    # no committed baseline for an A100: the last main run's artifact, from an H100, is refused
    artifact = bench_json(tmp_path / "last-main" / "benchmarks.json", H100, BASE)
    a100 = "NVIDIA A100-SXM4-80GB"
    assert run(tmp_path, committed, BASE, a100, "--artifact", str(artifact)) == 1
    assert f"recorded on {H100}, this run on {a100}" in capsys.readouterr().err
    same = bench_json(tmp_path / "last-a100" / "benchmarks.json", a100, BASE)
    assert run(tmp_path, committed, BASE, a100, "--artifact", str(same)) == 0
    # a committed file for the GPU wins over the artifact
    slow_artifact = bench_json(tmp_path / "slow" / "benchmarks.json", H100,
                               {k: v * 0.5 for k, v in BASE.items()})
    assert run(tmp_path, committed, BASE, H100, "--artifact", str(slow_artifact)) == 0
    assert "nvidia-h100-80gb-hbm3.json" in capsys.readouterr().out


def test_no_baseline_fails_unless_a_main_run_records_it(tmp_path, capsys):
    empty = tmp_path / "none"
    assert run(tmp_path, empty, BASE) == 1
    assert "no baseline for NVIDIA H100" in capsys.readouterr().err
    assert run(tmp_path, empty, BASE, H100, "--record-if-missing") == 0


def test_a_run_that_names_no_gpu_is_bad_input(tmp_path, committed, capsys):
    assert run(tmp_path, committed, BASE, None) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("benchmark_gate: error:") and "machine_info.gpu" in line


def test_the_workflow_gates_with_the_script_on_pull_requests_too():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-benchmarks.yml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1: on = True
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = workflow["jobs"].values()
    # a fork's code never runs on the self-hosted machine
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    commands = "\n".join(step.get("run", "") for step in job["steps"])
    assert "scripts/benchmark_gate.py" in commands and "--benchmark-compare" not in commands
