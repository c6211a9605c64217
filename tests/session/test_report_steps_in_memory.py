"""A run hands its report the steps it wrote (`StepColumns`), so `kvbench simulate` never reads
`steps.csv` back nor imports pandas; the charts drawn from them are those drawn from the file
(`kvbench report` on the folder), to the byte of the figures' JSON."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.report import charts, step_charts, timelines
from kvbench.report.figure_json import figure_json
from kvbench.report.runs import CHART_STEP_COLUMNS, collect_runs, load_run
from kvbench.report.style import run_styles
from kvbench.results import step_writer
from kvbench.session.run_config import ExecutorConfig, ReplayConfig, RunConfig, WorkloadConfig
from kvbench.session.runner import run_one
from kvbench.session.session import _report_run


def _run(folder: Path, *, steps_every: int = 1, fast_forward: bool = True):
    run = RunConfig(
        # A small arena: runs that preempt, and cells left empty (utilization over nothing).
        engine=EngineConfig(model="tiny", kv_memory="160KiB", block_size=4),
        workload=WorkloadConfig(name="parallel", num_requests=40,
                                params={"n": 2, "prompt_len": (4, 40), "output_len": (1, 30)}),
        replay=ReplayConfig(request_rate=20.0, warmup=0, steps_every=steps_every,
                            fast_forward=fast_forward),
        executor=ExecutorConfig(kind=EngineKind.SIMULATED, gpu="a100-40gb"),
    )
    return run_one(run, folder, show_progress=False, keep_for_report=True)


@pytest.mark.parametrize(("steps_every", "fast_forward"), [(1, True), (3, True), (1, False)])
def test_kept_steps_are_what_pandas_reads_of_the_file(tmp_path, steps_every, fast_forward):
    outcome = _run(tmp_path / "run", steps_every=steps_every, fast_forward=fast_forward)
    kept = outcome.steps
    read = pd.read_csv(tmp_path / "run" / "steps.csv", usecols=lambda c: c in CHART_STEP_COLUMNS)
    assert kept is not None and kept.names == list(read.columns)
    assert len(kept) == len(read) > 10 and outcome.summary.scheduler.preemptions > 0
    for name in read.columns:
        theirs = read[name].to_numpy()
        assert kept[name].dtype == theirs.dtype, name
        assert np.array_equal(kept[name], theirs, equal_nan=theirs.dtype.kind == "f"), name
    assert np.isnan(kept["kv_utilization"]).any()  # (the empty cells, as NaN)


def test_charts_from_kept_steps_are_the_charts_from_the_folder(tmp_path):
    outcome = _run(tmp_path / "run")
    session_runs = collect_runs([_report_run(outcome, tmp_path / "run", None)])
    folder_runs = collect_runs([load_run(tmp_path / "run")])
    assert "steps" in session_runs.runs[0].__dict__  # (handed over, not read)
    for draw in (timelines.timeline_figure, step_charts.step_time_figure,
                 charts.latency_cdf_figure, charts.ttft_split_figure):
        ours = draw(session_runs, run_styles(session_runs))
        theirs = draw(folder_runs, run_styles(folder_runs))
        assert figure_json(ours) == figure_json(theirs), draw.__name__
    assert figure_json(timelines.memory_timeline_figure(session_runs)) == \
        figure_json(timelines.memory_timeline_figure(folder_runs))


def test_a_run_too_long_to_keep_reads_its_steps_back(tmp_path, monkeypatch):
    monkeypatch.setattr(step_writer, "KEEP_MAX_ROWS", 5)
    outcome = _run(tmp_path / "run")
    assert outcome.steps is None
    run = _report_run(outcome, tmp_path / "run", None)
    assert len(run.steps) == len(pd.read_csv(tmp_path / "run" / "steps.csv"))


def test_simulate_never_imports_pandas(tmp_path):
    code = ("import sys\nfrom kvbench.cli.app import main\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    done = subprocess.run(
        [sys.executable, "-c", code, "simulate", "--model", "tiny", "--gpu", "a100-40gb",
         "--workload", "chat", "--num-requests", "20", "--strategy", "paged", "--quiet",
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("*/report.html"))
