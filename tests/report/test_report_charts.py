"""What a report's charts show: the batch size the summary averages, step time against
batch size, throughput over time, the TTFT split, ITLs from per-token times, the noise badge,
and one colour per run in every chart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbench.report import charts, step_charts, timelines
from kvbench.report.charts import sorted_inter_token_gaps_s
from kvbench.report.runs import load_runs
from kvbench.report.style import run_styles
from kvbench.report.writer import write_report
from kvbench.results.repeat import repeat_summary
from kvbench.results.token_times import TOKENS_FILE, TokenTimes, pooled_gaps_s, read_token_arrays


def _trace(fig, name):
    (found,) = [t for t in fig.data if t["name"] == name]
    return found


def test_batch_size_chart_plots_what_batch_size_mean_averages(comparison):
    runset = load_runs([comparison])
    fig = timelines.timeline_figure(runset, run_styles(runset))
    for run in runset.runs:
        batch = [t for t in fig.data if t["name"] == run.name and t["yaxis"] == "y2"]
        (line,) = batch
        assert np.mean(line["y"]) == pytest.approx(run.summary.scheduler.batch_size_mean)
        assert max(line["y"]) == run.summary.scheduler.batch_size_max


def test_step_time_line_is_the_median_of_decode_steps_per_batch_size(comparison):
    runset = load_runs([comparison / "paged"])
    fig = step_charts.step_time_figure(runset, run_styles(runset))
    steps = pd.read_csv(comparison / "paged" / "steps.csv")
    decode = steps[steps["num_prefill_seqs"] == 0]
    expected = decode.groupby("num_decode_seqs")["step_ms"].median()
    line = _trace(fig, "paged")
    assert list(line["x"]) == list(expected.index)
    assert list(line["y"]) == pytest.approx(list(expected))


@pytest.mark.parametrize("token_times", [True, False], ids=[TOKENS_FILE, "steps.csv"])
def test_throughput_over_time_counts_every_output_token(comparison, tmp_path, token_times):
    if not token_times:  # a folder written before runs kept token times
        comparison = shutil.copytree(comparison, tmp_path / "old")
        for path in comparison.rglob(TOKENS_FILE):
            path.unlink()
    runset = load_runs([comparison])
    fig, source = step_charts.throughput_timeline_figure(runset, run_styles(runset))
    assert source == (TOKENS_FILE if token_times else "steps.csv")
    for run in runset.runs:
        line = _trace(fig, run.name)
        width = line["x"][1] - line["x"][0]
        assert sum(line["y"]) * width == pytest.approx(run.requests["output_tokens"].sum())


def test_ttft_split_adds_up_to_the_mean_ttft(comparison):
    runset = load_runs([comparison])
    fig = charts.ttft_split_figure(runset, run_styles(runset))
    queue, prefill = fig.data
    for i, name in enumerate(queue["y"]):
        run = next(r for r in runset.runs if r.name == name)
        assert queue["x"][i] + prefill["x"][i] == pytest.approx(np.nanmean(run.requests["ttft_ms"]),
                                                          rel=1e-6)


def _with_token_times(comparison: Path, dest: Path) -> Path:
    """A copy of a run folder with an older kvbench's tokens.jsonl for its token file."""
    shutil.copytree(comparison / "paged", dest)
    (dest / TOKENS_FILE).unlink()
    lines = [{"request_id": 0, "sample": 0, "token_times_s": [0.5, 0.52, 0.55]},
             {"request_id": 1, "sample": 0, "token_times_s": [0.6, 0.7]},
             {"request_id": 2, "sample": 0, "token_times_s": [0.9]}]
    (dest / "tokens.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return dest


def test_itl_cdf_from_token_times(comparison, tmp_path):
    folder = _with_token_times(comparison, tmp_path / "paged")
    tokens = read_token_arrays(folder)
    assert pooled_gaps_s(tokens.times_s, tokens.starts) * 1e3 == pytest.approx([20.0, 30.0, 100.0])
    runset = load_runs([folder])
    fig = charts.itl_cdf_figure(runset, run_styles(runset))
    assert list(fig.data[0]["x"]) == pytest.approx([20.0, 30.0, 100.0])
    assert list(fig.data[0]["y"]) == pytest.approx([1 / 3, 2 / 3, 1.0])
    html = write_report([folder], tmp_path / "r.html").read_text()
    assert "<section id='itl'>" in html and f"from {TOKENS_FILE}" in html
    (folder / "tokens.jsonl").write_text("not json\n")  # damaged: chart left out, report fine
    assert charts.itl_cdf_figure(load_runs([folder]), run_styles(runset)) is None


def test_itl_cdf_of_a_long_run_plots_exact_quantiles_from_one_read(comparison, tmp_path,
                                                                    monkeypatch):
    folder = shutil.copytree(comparison / "paged", tmp_path / "paged")
    (folder / TOKENS_FILE).unlink()  # an older kvbench's tokens.jsonl instead
    rng = np.random.default_rng(0)
    samples = [np.round(np.cumsum(rng.exponential(0.03, int(n))), 6)
               for n in rng.integers(1, 400, 60)]
    (folder / "tokens.jsonl").write_text("".join(
        json.dumps({"request_id": i, "sample": 0, "token_times_s": s.tolist()}) + "\n"
        for i, s in enumerate(samples)))
    itl = np.sort(np.concatenate([np.diff(s) for s in samples]) * 1e3)
    assert itl.size > charts.CDF_POINTS
    reads = []
    monkeypatch.setattr("kvbench.report.runs.read_token_times",
                        lambda path: reads.append(path) or read_token_arrays(path))
    runset = load_runs([folder])
    styles = run_styles(runset)
    cdf = charts.itl_cdf_figure(runset, styles).data[0]
    x, y = cdf["x"], cdf["y"]
    # Each point is the k-th smallest gap at height k/n: the exact empirical CDF.
    assert len(x) <= charts.CDF_POINTS and y[-1] == 1.0
    ranks = np.round(np.asarray(y) * itl.size).astype(int) - 1
    assert np.allclose(x, itl[ranks], rtol=1e-9)
    step_charts.throughput_timeline_figure(runset, styles)
    assert reads == [folder]  # both charts, one read of the file


def test_repeated_runs_show_mean_and_confidence_interval(comparison, tmp_path):
    base = tmp_path / "paged"
    shutil.copytree(comparison / "paged", base / "rep-1")
    summary = json.loads((base / "rep-1" / "kvbench_summary.json").read_text())
    faster = json.loads(json.dumps(summary))
    faster["throughput"]["output_tok_s"] *= 1.1
    (base / "repeat.json").write_text(json.dumps(repeat_summary([summary, faster])))
    html = write_report([base / "rep-1"], tmp_path / "r.html").read_text()
    assert "mean ± 95% confidence interval over repeated runs" in html
    assert "single run" not in html
    mean = summary["throughput"]["output_tok_s"] * 1.05
    assert f"{mean:.1f} ± " in html


def test_a_run_keeps_its_colour_in_every_chart_across_folders(comparison, tmp_path):
    other = tmp_path / "again"
    shutil.copytree(comparison, other)
    runset = load_runs([comparison, other])
    styles = run_styles(runset)
    figures = [charts.throughput_figure(runset, styles), charts.latency_cdf_figure(runset, styles),
               charts.ttft_split_figure(runset, styles),
               step_charts.step_time_figure(runset, styles),
               step_charts.throughput_timeline_figure(runset, styles)[0],
               timelines.timeline_figure(runset, styles)]
    for fig in figures:
        for trace in fig.data:
            if trace["name"] in styles and trace.get("showlegend") is not False:
                part = trace["line"] if trace["type"] == "scatter" else trace["marker"]
                assert part["color"] == styles[trace["name"]].color, (
                    fig.layout["title"]["text"], trace["name"])
    # Throughput bars: one legend entry per run, each in the run's colour and pattern.
    bars = figures[0]
    assert [t["name"] for t in bars.data] == [r.name for r in runset.runs]
    assert len({(t["marker"]["color"], t["marker"]["pattern"]["shape"])
                for t in bars.data}) == 4


def test_legend_is_anchored_below_the_axis_labels(comparison):
    runset = load_runs([comparison / "paged"])
    fig = charts.memory_figure(runset)
    legend = fig.layout["legend"]
    assert legend["yref"] == "container" and legend["yanchor"] == "bottom"
    assert fig.layout["margin"]["b"] >= 100  # tick labels and axis title fit above the legend


def test_sorted_gaps_are_the_pooled_itls_sorted():
    """The ITL CDF's gaps, sorted in place in seconds, are the pooled ITLs
    sorted: samples without tokens, one token or a NaN time included."""
    rng = np.random.default_rng(1)
    samples = [np.round(np.cumsum(rng.exponential(0.02, n)), 6) for n in (5, 0, 1, 40, 3)]
    samples[3][7] = np.nan
    starts = np.concatenate([[0], np.cumsum([s.size for s in samples])])
    tokens = TokenTimes(np.arange(5), np.zeros(5, dtype=np.int64), starts,
                        np.concatenate(samples))
    itl_ms = pooled_gaps_s(tokens.times_s, tokens.starts) * 1e3
    gaps_s = sorted_inter_token_gaps_s(tokens)
    np.testing.assert_array_equal(gaps_s * 1e3, np.sort(itl_ms[~np.isnan(itl_ms)]))
    assert gaps_s.size == 4 + 39 - 2 + 2
