"""`kvbench compare BASE NEW --fail-on ...`: the differences table and the CI exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.report.metrics import METRICS, Difference, parse_thresholds


def summary(label: str, out_tok_s: float = 100.0, ttft_p99: float = 200.0,
            preemptions: int = 0, util: float = 0.9) -> dict:
    lat = {"mean": 10.0, "p50": 10.0, "p90": 20.0, "p99": 30.0, "max": 40.0}
    return {
        "label": label, "strategy": label.split("-")[0], "workload": "chat", "model": "tiny",
        "device": "cpu", "seed": 0, "num_requests": 8, "completed": 8, "failed": 0,
        "duration_s": 1.0,
        "throughput": {"output_tok_s": out_tok_s, "total_tok_s": 5 * out_tok_s,
                       "requests_s": out_tok_s / 50},
        "latency_ms": {"ttft": {**lat, "p99": ttft_p99}, "tpot": lat, "itl": lat, "e2e": lat},
        "memory": {"kv_budget_bytes": 2**20, "kv_capacity_tokens": 512,
                   "utilization_mean": util, "utilization_saturated": util},
        "scheduler": {"steps": 10, "preemptions": preemptions, "prefix_hit_rate": None},
    }


def write_run(folder: Path, data: dict, git: str = "aaaaaaa") -> Path:
    folder.mkdir(parents=True)
    (folder / "kvbench_summary.json").write_text(json.dumps(data))
    (folder / "config.json").write_text(json.dumps({"label": data["label"],
                                                    "versions": {"git": git}}))
    return folder


def write_comparison(folder: Path, summaries: list[dict], git: str = "aaaaaaa") -> Path:
    for s in summaries:
        write_run(folder / s["label"], s, git)
    (folder / "comparison.json").write_text(json.dumps(
        {"runs": [{"label": s["label"], "folder": s["label"]} for s in summaries],
         "summaries": summaries}))
    return folder


def test_threshold_semantics():
    (drop,) = parse_thresholds("output_tok_s:-5%")
    assert drop.crossed(100.0, 95.0) is None  # exactly at the limit holds
    assert drop.crossed(100.0, 94.9) is not None
    assert drop.crossed(100.0, 200.0) is None  # improvements never fail
    (rise,) = parse_thresholds("ttft.p99:+10%")
    assert rise.crossed(200.0, 220.0) is None
    assert "limit 220.0 ms" in rise.crossed(200.0, 221.0)
    (absolute,) = parse_thresholds("preemptions:+0")
    assert absolute.crossed(0.0, 0.0) is None and absolute.crossed(0.0, 1.0)
    (missing,) = parse_thresholds("ttft.p50:+5%")
    assert missing.crossed(None, 3.0) is None and missing.crossed(3.0, None)
    # Absolute, in milliseconds, with or without the unit written out.
    for text in ("ttft.p99:+10ms", "ttft.p99:+10"):
        (ms,) = parse_thresholds(text)
        assert ms.crossed(200.0, 210.0) is None and ms.crossed(200.0, 210.5)


def test_fail_on_help_shows_the_absolute_form():
    from kvbench.cli.compare import compare_command

    (option,) = [p for p in compare_command.params if p.name == "fail_on"]
    assert "+10ms" in option.help and "%" in option.help


@pytest.mark.parametrize("text", ["output_tok_s:5%", "output_tok_s", "nope:+1%",
                                  "ttft.p42:+1%", "output_tok_s:-x%", "output_tok_s:-5ms",
                                  "ttft.p99:+10s"])
def test_bad_thresholds_are_input_errors(text):
    with pytest.raises(KvbenchInputError):
        parse_thresholds(text)


def test_every_metric_reads_a_summary_and_formats():
    s = summary("paged")
    for m in METRICS.values():
        value = m.value(s)
        assert value is None or isinstance(value, float)
        assert isinstance(m.format(value), str)
    assert Difference(METRICS["output_tok_s"], 100.0, 110.0).verdict == "better"
    assert Difference(METRICS["ttft.p99"], 100.0, 110.0).verdict == "worse"
    assert Difference(METRICS["ttft.p99"], 100.0, 100.2).verdict == "same"
    # better or worse only beyond noise
    assert Difference(METRICS["output_tok_s"], 100.0, 101.0, beyond_noise=None).verdict == \
        "not tested"
    assert Difference(METRICS["output_tok_s"], 100.0, 90.0, beyond_noise=False).verdict == \
        "within noise"
    assert Difference(METRICS["ttft.p99"], 100.0, 100.2, beyond_noise=None).verdict == "same"


def test_compare_passes_and_prints_a_table(tmp_path, capsys):
    base = write_comparison(tmp_path / "base", [summary("paged"), summary("contiguous-max")])
    new = write_comparison(tmp_path / "new", [summary("paged", out_tok_s=97.0),
                                              summary("contiguous-max", ttft_p99=150.0)],
                           git="bbbbbbb")
    code = main(["compare", str(base), str(new), "--fail-on", "output_tok_s:-5%,ttft.p99:+10%"])
    assert code == 0
    out = capsys.readouterr().out
    assert "git aaaaaaa" in out and "git bbbbbbb" in out
    assert "paged" in out and "contiguous-max" in out
    assert "-3.0%" in out and "-25.0%" in out
    assert out.count("ok   output_tok_s:-5%") == 2


def test_compare_fails_when_a_threshold_is_crossed(tmp_path, capsys):
    base = write_comparison(tmp_path / "base", [summary("paged"), summary("prefix")])
    new = write_comparison(tmp_path / "new", [summary("paged", out_tok_s=90.0),
                                              summary("prefix", ttft_p99=260.0)])
    code = main(["compare", str(base), str(new), "--fail-on", "output_tok_s:-5%,ttft.p99:+10%"])
    assert code == 1
    captured = capsys.readouterr()
    assert "2 threshold(s) crossed" in captured.err
    assert "paged: output_tok_s:-5%: 100.0 tok/s -> 90.0 tok/s (-10.0%" in captured.err
    assert "prefix: ttft.p99:+10%: 200.0 ms -> 260.0 ms (+30.0%" in captured.err


def test_single_runs_pair_whatever_their_labels_and_json(tmp_path, capsys):
    base = write_run(tmp_path / "a", summary("paged", preemptions=0))
    new = write_run(tmp_path / "b", summary("prefix", preemptions=3))
    code = main(["compare", str(base), str(new), "--fail-on", "preemptions:+0", "--json"])
    assert code == 1
    data = json.loads(capsys.readouterr().out)
    (pair,) = data["pairs"]
    assert (pair["base_label"], pair["new_label"]) == ("paged", "prefix")
    # one measured run a side: a change, not tested against noise
    assert pair["metrics"]["preemptions"] == {"base": 0.0, "new": 3.0, "change": None,
                                              "verdict": "not tested"}
    assert data["passed"] is False and pair["checks"][0]["failed"] is True


def test_strategy_subfolder_against_comparison_and_unmatched(tmp_path, capsys):
    base = write_comparison(tmp_path / "base", [summary("paged"), summary("prefix")])
    new = write_run(tmp_path / "new", summary("paged"))
    assert main(["compare", str(base), str(new), "--metrics", "output_tok_s"]) == 0
    out = capsys.readouterr().out
    assert "not compared (no counterpart): prefix" in out
    assert "ttft.p99" not in out


@pytest.mark.parametrize("args, message", [
    (["--fail-on", "output_tok_s:5%"], "cannot read --fail-on item"),
    (["--fail-on", "speed:+5%"], "unknown metric 'speed'"),
    (["--metrics", "speed"], "unknown metric 'speed'"),
])
def test_bad_options_exit_2(tmp_path, capsys, args, message):
    base = write_run(tmp_path / "a", summary("paged"))
    new = write_run(tmp_path / "b", summary("paged"))
    assert main(["compare", str(base), str(new), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvbench: error: ") and message in err and len(err.splitlines()) == 1


def test_bad_folders_exit_2(tmp_path, capsys):
    base = write_comparison(tmp_path / "base", [summary("paged"), summary("prefix")])
    other = write_comparison(tmp_path / "other", [summary("fp8"), summary("contiguous-max")])
    assert main(["compare", str(base), str(tmp_path / "missing")]) == 2
    assert "no such results folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(base), str(tmp_path / "empty")]) == 2
    assert "not a kvbench results folder" in capsys.readouterr().err
    assert main(["compare", str(base), str(other)]) == 2
    assert "no strategy in common" in capsys.readouterr().err


def write_repeat(folder: Path, data: dict, out_tok_s: list[float]) -> Path:
    """A `--repeat N` strategy folder: rep-1..N and repeat.json (as run_session writes it)."""
    from kvbench.results.repeat import repeat_summary

    summaries = [{**data, "throughput": {**data["throughput"], "output_tok_s": v}}
                 for v in out_tok_s]
    for k, s in enumerate(summaries, 1):
        write_run(folder / f"rep-{k}", s)
    (folder / "repeat.json").write_text(json.dumps(repeat_summary(summaries)))
    return folder


@pytest.mark.parametrize("status_where", ["folder", "summary"])
def test_an_unfinished_run_is_refused(tmp_path, capsys, status_where):
    base = write_run(tmp_path / "a", summary("paged"))
    data = summary("paged")
    data["status"] = "interrupted"
    # An interrupted run's working folder, or a copy of it renamed by hand.
    new = write_run(tmp_path / ("b.partial" if status_where == "folder" else "b"), data)
    assert main(["compare", str(base), str(new), "--allow-mismatch"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "is not whole" in err and "interrupted" in err


@pytest.mark.parametrize("change, named", [
    ({"workload": "sharegpt"}, "workload (chat vs sharegpt)"),
    ({"model": "llama-2-7b"}, "model (tiny vs llama-2-7b)"),
    ({"num_requests": 16}, "num_requests (8 vs 16)"),
    ({"dtype": "bfloat16"}, "dtype (float32 vs bfloat16)"),
    ({"seed": 1}, "seed (0 vs 1)"),
])
def test_runs_that_differ_in_more_than_the_strategy_are_refused(tmp_path, capsys, change,
                                                               named):
    base = write_run(tmp_path / "a", {**summary("paged"), "dtype": "float32"})
    new = write_run(tmp_path / "b", {**summary("paged"), "dtype": "float32", **change})
    assert main(["compare", str(base), str(new)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and named in err and "--allow-mismatch" in err
    assert main(["compare", str(base), str(new), "--allow-mismatch"]) == 0
    captured = capsys.readouterr()
    assert "paged" in captured.out
    warnings = [line for line in captured.err.splitlines() if named in line]
    assert len(warnings) == 1 and warnings[0].startswith("kvbench: warning: ")


def test_two_runs_differing_only_in_seed_are_refused(tmp_path, capsys):
    runs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        assert main(["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--seed", seed,
                     "--quiet", "--out", str(out)]) == 0
        (folder,) = out.iterdir()
        runs.append(str(folder))
    capsys.readouterr()
    assert main(["compare", *runs]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "seed (1 vs 2)" in err


def test_budget_kv_dtype_and_workload_params_are_checked(tmp_path, capsys):
    base = write_run(tmp_path / "a", summary("paged"))
    other = summary("paged")
    other["memory"] = {**other["memory"], "kv_budget_bytes": 2**21,
                       "kv_cache_dtype": "float8_e4m3fn"}
    new = write_run(tmp_path / "b", other)
    (new / "config.json").write_text(json.dumps(
        {"label": "paged", "run": {"workload_params": {"system_prompt_len": 64}}}))
    assert main(["compare", str(base), str(new)]) == 2
    err = capsys.readouterr().err
    assert "KV budget (1048576 vs 2097152)" in err
    assert "workload params ({} vs {system_prompt_len=64})" in err
    # an older folder that does not record kv_cache_dtype is not held against the other
    assert "kv_cache_dtype" not in err


def test_runs_under_different_conversation_rates_are_refused(tmp_path, capsys):
    runs = []
    for name, rate in (("a", 1.0), ("b", 2.0)):
        folder = write_run(tmp_path / name, summary("paged"))
        (folder / "config.json").write_text(json.dumps(
            {"label": "paged", "run": {"request_rate": "inf", "conversation_rate": rate}}))
        runs.append(str(folder))
    assert main(["compare", *runs]) == 2
    assert "conversation_rate (1.0 vs 2.0)" in capsys.readouterr().err


def test_single_runs_warn_that_they_cannot_tell_noise(tmp_path, capsys):
    base = write_run(tmp_path / "a", summary("paged"))
    new = write_run(tmp_path / "b", summary("paged", out_tok_s=103.0))
    assert main(["compare", str(base), str(new)]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert "single-run comparison" in line and "--repeat" in line
    simulated = {**summary("paged"), "executor": "simulated"}
    a = write_run(tmp_path / "sa", simulated)
    b = write_run(tmp_path / "sb", simulated)
    assert main(["compare", str(a), str(b)]) == 0
    assert capsys.readouterr().err == ""  # a simulated clock has no noise


def test_repeats_compare_means_and_say_whether_cis_overlap(tmp_path, capsys):
    base = write_repeat(tmp_path / "a", summary("paged"), [100.0, 102.0, 98.0])
    close = write_repeat(tmp_path / "b", summary("paged"), [101.0, 103.0, 99.0])
    far = write_repeat(tmp_path / "c", summary("paged"), [120.0, 121.0, 119.0])
    assert main(["compare", str(base), str(close), "--metrics", "output_tok_s",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["pairs"][0]["metrics"]["output_tok_s"]
    assert (row["base"], row["new"]) == (100.0, 101.0)  # means over the repeats
    assert row["within_noise"] is True and data["warnings"] == []
    assert main(["compare", str(base), str(far), "--metrics", "output_tok_s",
                 "--fail-on", "output_tok_s:-5%"]) == 0
    out = capsys.readouterr().out
    assert "beyond noise" in out and "120.0 tok/s" in out
    assert main(["compare", str(base), str(close), "--metrics", "output_tok_s"]) == 0
    assert "within noise (CIs overlap)" in capsys.readouterr().out


def test_markdown_for_a_pull_request_comment(tmp_path, capsys):
    base = write_comparison(tmp_path / "base", [summary("paged"), summary("prefix")])
    new = write_comparison(tmp_path / "new", [summary("paged", out_tok_s=90.0),
                                              summary("prefix")])
    code = main(["compare", str(base), str(new), "--format", "markdown",
                 "--metrics", "output_tok_s", "--fail-on", "output_tok_s:-5%"])
    assert code == 1
    out = capsys.readouterr().out
    assert out.startswith("### kvbench compare: **1 threshold(s) crossed**")
    assert "| metric | base | new | change | verdict |" in out
    assert "| `output_tok_s` | 100.0 tok/s | 90.0 tok/s | -10.0% | not tested |" in out
    assert ":x: FAIL `output_tok_s:-5%`" in out
    assert "> **warning:** single-run comparison" in out


def test_without_fail_on_there_is_no_gate_to_pass(tmp_path, capsys):
    base = write_run(tmp_path / "a", summary("paged"))
    new = write_run(tmp_path / "b", summary("paged", out_tok_s=101.0))
    assert main(["compare", str(base), str(new), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### kvbench compare: **no gate** (no --fail-on)")
    assert "passed" not in out
    assert "| +1.0% | not tested |" in out  # a 1% change of one noisy run: no verdict
    assert main(["compare", str(base), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is None
    assert main(["compare", str(base), str(new), "--format", "markdown",
                 "--fail-on", "output_tok_s:-5%"]) == 0
    assert capsys.readouterr().out.startswith("### kvbench compare: **passed**")


def test_verdicts_from_repeats_and_from_simulated_runs(tmp_path, capsys):
    base = write_repeat(tmp_path / "a", summary("paged"), [100.0, 102.0, 98.0])
    close = write_repeat(tmp_path / "b", summary("paged"), [101.0, 103.0, 99.0])
    far = write_repeat(tmp_path / "c", summary("paged"), [90.0, 91.0, 89.0])
    verdicts = []
    for new in (close, far):
        assert main(["compare", str(base), str(new), "--metrics", "output_tok_s",
                     "--json"]) == 0
        verdicts.append(json.loads(capsys.readouterr().out)["pairs"][0]["metrics"]
                        ["output_tok_s"]["verdict"])
    assert verdicts == ["within noise", "worse"]
    simulated = {**summary("paged"), "executor": "simulated"}
    a = write_run(tmp_path / "sa", simulated)
    b = write_run(tmp_path / "sb", {**simulated, "throughput": {
        **simulated["throughput"], "output_tok_s": 101.0}})
    assert main(["compare", str(a), str(b), "--metrics", "output_tok_s", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["pairs"][0]["metrics"]["output_tok_s"]
    assert row["verdict"] == "better"  # a simulated clock has no noise
