"""`kvbench.session.session`: what `kvbench run`/`simulate` do, called as a library."""

from __future__ import annotations

import json

import pytest

from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.report.runs import run_folders
from kvbench.results.run_folder import claim_working_folder, is_whole
from kvbench.session.run_options import RunOptions
from kvbench.session.session import (
    SessionResult,
    check_distinct,
    expand_runs,
    plan_session,
    run_session,
)


def test_comma_lists_expand_to_one_run_per_combination():
    options = RunOptions(strategy="contiguous,paged", reserve="max,pow2",
                         batching="continuous,static", slo="ttft=500ms")
    runs = expand_runs(options)
    # contiguous takes each reservation; paged reserves nothing, so one run per batching
    assert [(r.engine.batching, r.engine.strategy, r.engine.reserve) for r in runs] == [
        ("continuous", "contiguous", "max"), ("continuous", "contiguous", "pow2"),
        ("continuous", "paged", "max"), ("static", "contiguous", "max"),
        ("static", "contiguous", "pow2"), ("static", "paged", "max")]
    assert all(r.replay.slo_ms == {"ttft": 500.0} and r.executor.kind is EngineKind.MODEL
               for r in runs)


def test_simulate_runs_on_the_gpu_preset_and_refuses_an_unknown_one():
    (run,) = expand_runs(RunOptions.for_kind("simulate", gpu="l4"))
    assert (run.executor.kind, run.executor.gpu, run.engine.device) == (
        EngineKind.SIMULATED, "l4", "cpu")
    with pytest.raises(KvbenchInputError, match="unknown --gpu 'z80'"):
        expand_runs(RunOptions.for_kind("simulate", gpu="z80"))


def test_a_claimed_folder_never_reuses_a_name(tmp_path):
    assert claim_working_folder(tmp_path, "a") == tmp_path / "a.partial"
    (tmp_path / "a-2").mkdir()  # a finished run's
    (tmp_path / "a-3.partial").mkdir()  # a run's still working
    assert claim_working_folder(tmp_path, "a") == tmp_path / "a-4.partial"
    assert (tmp_path / "a.partial").is_dir() and not is_whole(tmp_path / "a.partial")


def test_a_session_returns_its_results_and_prints_nothing(tmp_path, capsys):
    options = RunOptions.for_kind(
        "simulate", strategy="contiguous,paged", model="llama-2-7b", workload="sharegpt",
        num_requests=12, warmup=0, repeat=2, out=str(tmp_path), defaults="classic")
    plan = plan_session(options)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # planning writes nothing
    started = []
    result = run_session(plan, on_run_start=lambda *args: started.append(args))
    assert capsys.readouterr() == ("", "")
    # interleaved (A B A B): a slow spell of the machine lands on both strategies
    assert started == [("contiguous-max", 1, 2), ("paged", 1, 2), ("contiguous-max", 2, 2),
                       ("paged", 2, 2)]
    assert result.notes == []  # repeats give confidence intervals: no noise warning
    assert [s["label"] for s in result.summaries] == ["contiguous-max", "paged"]
    assert len(result.repeats) == 2
    root = result.root
    assert root.parent == tmp_path and root.name.endswith("-compare-sharegpt")
    assert (root / "comparison.csv").is_file() and (root / "report.html").is_file()
    comparison = json.loads((root / "comparison.json").read_text())
    assert [r["folder"] for r in comparison["runs"]] == ["contiguous-max/rep-1", "paged/rep-1"]
    assert run_folders(root) == [root / "contiguous-max" / "rep-1", root / "paged" / "rep-1"]
    assert (root / "paged" / "rep-2" / "kvbench_summary.json").is_file()
    assert (root / "paged" / "repeat.json").is_file()


def test_bad_repeat_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(KvbenchInputError, match="--repeat must be at least 1"):
        plan_session(RunOptions(repeat=0, out=str(tmp_path / "o")))
    assert not (tmp_path / "o").exists()


def test_repeats_run_interleaved_and_single_runs_warn_about_noise(tmp_path):
    """Each repeat round runs every strategy once before the next round starts, and the
    folders' start times show it; a single-run ranking carries a note to rerun with
    --repeat."""
    options = RunOptions.for_kind(
        "simulate", strategy="contiguous,paged,prefix", model="llama-2-7b",
        workload="sharegpt", num_requests=4, warmup=0, repeat=2, out=str(tmp_path / "r"),
        defaults="classic")
    result = run_session(plan_session(options))
    folders = [result.root / label / f"rep-{k}" for k in (1, 2)
               for label in ("contiguous-max", "paged", "prefix")]
    written = [(f / "kvbench_summary.json").stat().st_mtime_ns for f in folders]
    assert written == sorted(written)
    once = SessionResult(tmp_path, result.outcomes, repeats=[])
    (note,) = once.notes
    assert "not significant" in note and "--repeat 3" in note
    # a simulated clock has no noise to warn about
    assert SessionResult(tmp_path, result.outcomes, repeats=[], measured=False).notes == []


def test_on_cuda_the_budget_is_measured_once_and_every_strategy_runs_on_it(monkeypatch):
    # The first run's plan measures what --gpu-memory-utilization leaves; every run, the
    # first included, is pinned to those bytes (not to what is left after an earlier engine).
    from types import SimpleNamespace

    import torch

    import kvbench.session.session as session
    from kvbench.session.session import _prepare_all

    planned_with = []

    def fake_check_run(run, model_cache):
        planned_with.append(run.engine.kv_memory)
        plan = SimpleNamespace(device=torch.device("cuda"), kv_budget_bytes=123 * 2**20,
                               shape=SimpleNamespace(config=run.engine))
        return plan, SimpleNamespace(requests=[])

    monkeypatch.setattr(session, "check_run", fake_check_run)
    runs = expand_runs(RunOptions.for_kind("run", strategy="contiguous,paged,prefix"))
    _prepare_all(runs, {})
    assert planned_with == [None, 123 * 2**20, 123 * 2**20]
    assert [r.engine.kv_memory for r in runs] == [123 * 2**20] * 3
    assert all(r.engine.gpu_memory_utilization is None for r in runs)


def test_each_engine_is_built_once_when_its_run_starts(tmp_path, monkeypatch):
    import kvbench.session.session as session

    events = []
    build = session.build

    def recorded_build(run, plan):
        events.append(("build", run.engine.strategy))
        return build(run, plan)

    monkeypatch.setattr(session, "build", recorded_build)
    plan = plan_session(RunOptions(strategy="paged,contiguous", num_requests=2, warmup=0,
                                   repeat=2, out=str(tmp_path)))
    assert events == []  # planned and checked: nothing built
    run_session(plan, on_run_start=lambda label, k, n: events.append(("start", label)))
    assert events == [("start", "paged"), ("build", "paged"),
                      ("start", "contiguous-max"), ("build", "contiguous")] * 2


def test_transformers_runs_of_a_strategy_list_are_one_run():
    with pytest.raises(KvbenchInputError, match="twice|same run"):
        check_distinct(expand_runs(RunOptions.for_kind(
            "run", strategy="paged,contiguous", engine_kind="hf")))


def test_simulate_dtype_auto_is_the_modelled_gpus_not_the_hosts():
    (run,) = expand_runs(RunOptions.for_kind("simulate", dtype="auto"))
    assert run.engine.dtype == "bfloat16"
