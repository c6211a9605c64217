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
    (folder / "summary.json").write_text(json.dumps(data))
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


@pytest.mark.parametrize("text", ["output_tok_s:5%", "output_tok_s", "nope:+1%",
                                  "ttft.p42:+1%", "output_tok_s:-x%"])
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
    assert pair["metrics"]["preemptions"] == {"base": 0.0, "new": 3.0, "change": None,
                                              "verdict": "worse"}
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
