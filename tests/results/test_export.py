"""`kvbench export`: a run as `vllm bench serve --save-result` JSON and as per-request CSV."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from kvbench.cli import main
from kvbench.results.export import peak_concurrent_requests
from kvbench.results.token_times import TOKENS_FILE
from kvbench.session.run_options import RunOptions
from kvbench.session.session import plan_session, run_session


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """A simulated two-strategy run (fast, and written by the same runner as `kvbench run`)."""
    out = tmp_path_factory.mktemp("export")
    options = RunOptions.for_kind("simulate", strategy="paged,prefix", model="llama-2-7b",
                                  workload="chat", num_requests=8, warmup=0, out=str(out),
                                  defaults="classic")
    return run_session(plan_session(options)).root


def read_like_a_vllm_user(path):
    """What scripts written for vLLM's saved results do: json.load, then keys and lists."""
    with open(path) as f:
        result = json.load(f)
    n = result["completed"]
    assert len(result["ttfts"]) == len(result["itls"]) == len(result["input_lens"]) \
        == len(result["output_lens"]) == result["num_prompts"]
    return {
        "completed": n,
        "req_s": result["request_throughput"],
        "out_tok_s": result["output_throughput"],
        "total_tok_s": result["total_token_throughput"],
        "mean_ttft_ms": result["mean_ttft_ms"],
        "p99_ttft_ms": result["p99_ttft_ms"],
        "mean_tpot_ms": result["mean_tpot_ms"],
        "median_e2el_ms": result["median_e2el_ms"],
        "std_itl_ms": result["std_itl_ms"],
        "mean_itl_ms": result["mean_itl_ms"],
        # rebuilt from the lists, as users do for their own percentiles
        "ttft_mean_from_list_ms": float(np.mean(result["ttfts"])) * 1e3,
        "itl_from_lists_ms": [g * 1e3 for gaps in result["itls"] for g in gaps],
        "output_tokens": sum(result["output_lens"]),
    }


def test_vllm_bench_export_matches_summary(comparison, tmp_path, capsys):
    run = comparison / "paged"
    out = tmp_path / "paged.json"
    assert main(["export", str(run), "--format", "vllm-bench", "-o", str(out)]) == 0
    assert "could not fill" not in capsys.readouterr().err
    got = read_like_a_vllm_user(out)
    summary = json.loads((run / "kvbench_summary.json").read_text())
    lat = summary["latency_ms"]
    assert got["completed"] == summary["completed"] == 8
    assert got["req_s"] == pytest.approx(summary["throughput"]["requests_s"])
    assert got["out_tok_s"] == pytest.approx(summary["throughput"]["output_tok_s"])
    assert got["total_tok_s"] == pytest.approx(summary["throughput"]["total_tok_s"])
    assert got["mean_ttft_ms"] == pytest.approx(lat["ttft"]["mean"])
    assert got["p99_ttft_ms"] == pytest.approx(lat["ttft"]["p99"])
    assert got["ttft_mean_from_list_ms"] == pytest.approx(lat["ttft"]["mean"])
    assert got["mean_tpot_ms"] == pytest.approx(lat["tpot"]["mean"])
    assert got["median_e2el_ms"] == pytest.approx(lat["e2e"]["p50"])
    # ITL rebuilt from the token file
    assert got["mean_itl_ms"] == pytest.approx(lat["itl"]["mean"], abs=1e-3)
    assert np.mean(got["itl_from_lists_ms"]) == pytest.approx(lat["itl"]["mean"], abs=1e-3)
    assert np.max(got["itl_from_lists_ms"]) == pytest.approx(lat["itl"]["max"], abs=1e-3)
    assert got["std_itl_ms"] == pytest.approx(np.std(got["itl_from_lists_ms"]))
    assert got["output_tokens"] == pd.read_csv(run / "requests.csv")["output_tokens"].sum()


def test_a_folder_without_token_times_exports_what_it_can(comparison, tmp_path, capsys):
    old = tmp_path / "old"
    old.mkdir()
    for name in ("kvbench_summary.json", "config.json", "requests.csv", "steps.csv"):
        (old / name).write_bytes((comparison / "prefix" / name).read_bytes())
    assert main(["export", str(old), "--format", "vllm-bench"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "itls" not in result and "std_itl_ms" not in result
    assert "max_output_tokens_per_s" not in result
    assert result["max_concurrent_requests"] >= 1  # from start times and latencies alone
    summary = json.loads((old / "kvbench_summary.json").read_text())
    assert result["mean_itl_ms"] == summary["latency_ms"]["itl"]["mean"]
    assert len(result["ttfts"]) == 8
    (line,) = captured.err.splitlines()
    assert "could not fill itls, max_output_tokens_per_s, std_itl_ms" in line


def test_csv_has_a_row_per_request_of_every_strategy(comparison, tmp_path, capsys):
    out = tmp_path / "requests.csv"
    assert main(["export", str(comparison), "--format", "csv", "-o", str(out)]) == 0
    frame = pd.read_csv(out)
    assert sorted(frame["label"].unique()) == ["paged", "prefix"]
    assert len(frame) == 16
    assert frame["itl_mean_ms"].notna().all()


def test_format_vllm_is_vllm_bench(comparison, capsys):
    run = comparison / "paged"
    assert main(["export", str(run), "--format", "vllm-bench"]) == 0
    bench = json.loads(capsys.readouterr().out)
    assert main(["export", str(run), "--format", "vllm"]) == 0
    assert json.loads(capsys.readouterr().out) == bench


def test_vllm_export_of_a_comparison_folder_names_its_runs(comparison, capsys):
    assert main(["export", str(comparison), "--format", "vllm-bench"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "holds 2 runs (paged, prefix)" in err


def test_tokens_file_holds_every_output_token(comparison):
    frame = pd.read_csv(comparison / "paged" / "requests.csv")
    rows = pq.read_table(comparison / "paged" / TOKENS_FILE).to_pylist()
    assert [r["request_id"] for r in rows] == list(frame["request_id"])
    assert [len(r["token_times_s"]) for r in rows] == list(frame["output_tokens"])
    first = {r["request_id"]: r["token_times_s"][0] for r in rows}
    assert [first[i] for i in frame["request_id"]] == pytest.approx(
        list(frame["first_token_s"]), abs=1e-6)


def test_an_older_folder_with_summary_json_still_reads(comparison, tmp_path, capsys):
    old = tmp_path / "old"
    old.mkdir()
    for name in ("config.json", "requests.csv", "steps.csv", TOKENS_FILE):
        (old / name).write_bytes((comparison / "paged" / name).read_bytes())
    (old / "summary.json").write_bytes((comparison / "paged" / "kvbench_summary.json")
                                       .read_bytes())
    assert main(["export", str(old), "--format", "vllm-bench"]) == 0
    assert json.loads(capsys.readouterr().out)["completed"] == 8


def test_a_vllm_sweep_summary_is_not_a_kvbench_run(comparison, tmp_path, capsys):
    sweep = tmp_path / "vllm"
    assert main(["export", str(comparison), "--format", "vllm-sweep", "-o", str(sweep)]) == 0
    capsys.readouterr()
    assert main(["export", str(sweep / "paged"), "--format", "vllm-bench"]) == 2
    assert "not a kvbench results folder" in capsys.readouterr().err


@pytest.mark.parametrize(("intervals", "peak"), [
    ([(0.0, 1.0), (1.0, 2.0)], 1),  # half-open: one ends as the other starts
    ([(0.0, 1.5), (1.0, 2.0)], 2),
    ([(0.0, 0.1), (0.2, 0.3), (0.4, 0.5), (0.6, 0.7), (0.8, 0.9)], 1),  # no second buckets
    ([(0.0, 1.0), (0.0, 1.0), (1.0, 2.0), (1.0, 2.0), (1.0, 2.0)], 3),
    ([(0.0, 0.0)], 0),  # a zero-latency request is an empty interval
    ([], 0),
])
def test_max_concurrent_requests_is_vllms_exact_peak(intervals, peak):
    """vLLM's `max_concurrent_requests` (`calculate_concurrency` in
    vllm/benchmarks/lib/utils.py, the cases of its tests/benchmarks/test_serve_metrics.py):
    the exact peak over half-open [start, end) intervals. Releases before it counted every
    request active during each one-second bucket, which overcounts (5 for the third case)."""
    start = np.array([a for a, _ in intervals], dtype=float)
    end = np.array([b for _, b in intervals], dtype=float)
    assert peak_concurrent_requests(start, end) == peak
