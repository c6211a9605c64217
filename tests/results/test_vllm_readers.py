"""kvbench's vLLM export read by the logic of vLLM's own readers: `vllm bench sweep plot` and
`vllm bench sweep plot_pareto` (vllm/benchmarks/sweep/plot.py, plot_pareto.py), transcribed
here (not imported: vLLM is no dependency), and vLLM's per-request formulas
(vllm/benchmarks/serve.py, calculate_metrics) applied to the exported lists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from kvbench.cli import main
from kvbench.results.token_times import TOKENS_FILE
from kvbench.session.run_options import RunOptions
from kvbench.session.session import plan_session, run_session


# --- vllm/benchmarks/sweep/plot.py: what `vllm bench sweep plot OUTPUT_DIR` loads ---------
def vllm_plot_records(output_dir: Path) -> list[dict]:
    all_data = [run_data for path in output_dir.rglob("**/summary.json")
                for run_data in json.loads(path.read_bytes())]
    if not all_data:
        raise ValueError(f"Did not find any parameter sweep results under {output_dir}")
    converted = []  # _convert_inf_nan_strings
    for record in all_data:
        converted.append({k: float(v) if isinstance(v, str) and v in ("inf", "-inf", "nan")
                          else v for k, v in record.items()})
    return converted


def vllm_plot_frame(output_dir: Path, var_x: str = "request_throughput",
                    var_y: str = "p99_e2el_ms") -> pd.DataFrame:
    df = pd.DataFrame.from_records(vllm_plot_records(output_dir))
    for var in (var_x, var_y):
        if var not in df.columns:
            raise ValueError(f"Cannot find {var!r} in parameter sweep results")
    return df


# --- vllm/benchmarks/sweep/plot_pareto.py -------------------------------------------------
def _first_present(run_data, keys):
    for key in keys:
        for candidate in {key, key.replace("_", "-"), key.replace("-", "_")}:
            if candidate in run_data:
                return run_data[candidate]
    return None


def _get_numeric(run_data, keys, *, allow_zero=True):
    value = _first_present(run_data, keys)
    if value is None:
        return None
    numeric = float(value)  # vLLM raises ValueError on a non-numeric value
    if not allow_zero and numeric == 0:
        return None
    return numeric


def _infer_user_count(run_data, user_count_var):
    candidates = [user_count_var] if user_count_var else []
    candidates.extend(["request_rate"])
    user_count = _get_numeric(run_data, candidates, allow_zero=False)
    if user_count is not None:
        return user_count
    return _get_numeric(run_data, ["max_concurrent_requests"], allow_zero=False)


def _infer_gpu_count(run_data, gpu_count_var):
    direct = _get_numeric(run_data, [gpu_count_var] if gpu_count_var else [],
                          allow_zero=False)
    if direct:
        return direct
    world_size = 1.0
    for keys in (["tensor_parallel_size", "tp"], ["pipeline_parallel_size", "pp"],
                 ["data_parallel_size", "dp"]):
        size = _get_numeric(run_data, keys)
        if size:
            world_size *= size
    return world_size


def vllm_pareto_points(output_dir: Path, user_count_var: str | None = "max_concurrency",
                       gpu_count_var: str | None = None) -> pd.DataFrame:
    raw_data = vllm_plot_records(output_dir)
    prepared = []
    for record in raw_data:
        throughput = _get_numeric(record, ["output_throughput"])
        if throughput is None:
            raise ValueError("Cannot find throughput metric 'output_throughput'")
        user_count = _infer_user_count(record, user_count_var)
        if user_count is None:
            continue
        gpu_count = _infer_gpu_count(record, gpu_count_var)
        prepared.append({**record, "tokens_per_user": throughput / user_count,
                         "tokens_per_gpu": throughput / gpu_count,
                         "user_count_estimate": user_count, "gpu_count": gpu_count})
    if not prepared:
        raise ValueError("No data points with both throughput and user count available "
                         "to plot Pareto frontier.")
    df = pd.DataFrame.from_records(prepared).dropna(subset=["tokens_per_user",
                                                            "tokens_per_gpu"])
    if df.empty:
        raise ValueError("No data points available after filtering")
    return df


def pareto_frontier(df: pd.DataFrame, x_col: str, y_col: str, epsilon: float = 1e-9):
    sorted_df = df.sort_values([x_col, y_col], ascending=[False, False])
    frontier, best_y = [], -math.inf
    for idx, row in sorted_df.iterrows():
        if row[y_col] >= best_y - epsilon:
            frontier.append(idx)
            best_y = max(best_y, row[y_col])
    return df.loc[frontier]


# --- kvbench runs and their export --------------------------------------------------------
CASES = {  # name: (workload, max_concurrency, samples per request)
    "n1-unlimited": ("uniform", None, 1),
    "n4-concurrency2": ("parallel", 2, 4),
}


@pytest.fixture(scope="module", params=list(CASES))
def exported(request, tmp_path_factory):
    workload, concurrency, n = CASES[request.param]
    out = tmp_path_factory.mktemp(request.param)
    options = RunOptions.for_kind(
        "simulate", strategy="paged,prefix", model="llama-2-7b", workload=workload,
        num_requests=6, warmup=0, max_concurrency=concurrency, request_rate="8",
        out=str(out / "kvbench"), defaults="classic")
    root = run_session(plan_session(options)).root
    sweep = out / "vllm"
    assert main(["export", str(root), "--format", "vllm-sweep", "-o", str(sweep)]) == 0
    bench = out / "paged.json"
    assert main(["export", str(root / "paged"), "--format", "vllm-bench",
                 "-o", str(bench)]) == 0
    return root, sweep, json.loads(bench.read_text()), concurrency, n


def test_vllm_sweep_plot_finds_every_run(exported):
    root, sweep, _, _, _ = exported
    df = vllm_plot_frame(sweep)
    # Pointed at a folder that also holds kvbench's own results, it reads only the export:
    # no kvbench file is named like the one it reads.
    assert not list(root.rglob("summary.json"))
    assert sorted(vllm_plot_frame(sweep.parent)["label"]) == sorted(df["label"])
    with pytest.raises(ValueError, match="Did not find any parameter sweep results"):
        vllm_plot_records(root)
    assert sorted(df["label"]) == ["paged", "prefix"]
    assert df["request_throughput"].notna().all() and (df["p99_e2el_ms"] > 0).all()
    for label in ("paged", "prefix"):
        summary = json.loads((root / label / "kvbench_summary.json").read_text())
        row = df[df["label"] == label].iloc[0]
        assert row["request_throughput"] == pytest.approx(summary["throughput"]["requests_s"])
        assert row["run_number"] == 0


def test_vllm_pareto_plot_finds_data_points(exported):
    _, sweep, _, concurrency, _ = exported
    points = vllm_pareto_points(sweep)
    assert len(points) == 2
    expected_users = points["max_concurrency"] if concurrency else \
        points["max_concurrent_requests"]
    assert list(points["user_count_estimate"]) == list(expected_users.astype(float))
    assert (points["tokens_per_user"] > 0).all()
    assert (points["gpu_count"] == 1.0).all()  # tensor_parallel_size 1, as the run's
    assert len(pareto_frontier(points, "tokens_per_user", "tokens_per_gpu")) >= 1


def test_export_keeps_vllm_invariants_per_request(exported):
    root, _, result, concurrency, n = exported
    frame = pd.read_csv(root / "paged" / "requests.csv")
    assert set(frame["n"]) == {n}
    assert result["max_concurrency"] == concurrency
    assert isinstance(result["max_concurrent_requests"], int)
    if concurrency and "sent_s" in frame:  # each request's clock starts when it is sent
        assert 1 <= result["max_concurrent_requests"] <= concurrency
    assert result["endpoint_type"] == result["backend"] == "kvbench"
    assert result["rtfx"] == 0.0 and isinstance(result["max_output_tokens_per_s"], float)
    lists = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
             "queue_times", "generated_texts", "errors")
    assert all(len(result[k]) == result["num_prompts"] == frame["request_id"].nunique()
               for k in lists)  # requests.csv: a row per sample; the export: per request
    tokens = pq.read_table(root / "paged" / TOKENS_FILE).to_pylist()
    tokens_per_request = pd.Series([len(t["token_times_s"]) for t in tokens]).groupby(
        [t["request_id"] for t in tokens]).sum()
    assert result["output_lens"] == list(tokens_per_request)  # every sample's tokens
    tpots = []
    for ttft, itls, latency, out_len in zip(result["ttfts"], result["itls"],
                                            result["latencies"], result["output_lens"],
                                            strict=True):
        assert len(itls) == out_len - 1  # one gap per token after the first, all samples
        assert ttft + sum(itls) == pytest.approx(latency, abs=2e-6)
        assert min(itls) >= 0
        if out_len > 1:
            tpots.append((latency - ttft) / (out_len - 1))  # vLLM's calculate_metrics
    assert result["mean_tpot_ms"] == pytest.approx(np.mean(tpots) * 1e3)
    assert result["median_e2el_ms"] == pytest.approx(np.median(result["latencies"]) * 1e3)
    all_itls = [g for gaps in result["itls"] for g in gaps]
    assert result["mean_itl_ms"] == pytest.approx(np.mean(all_itls) * 1e3)
    # vLLM's token-time reconstruction (start + ttft + cumulative ITLs) in 1-s buckets
    start = min(result["start_times"])
    buckets: dict[int, int] = {}
    for begin, ttft, itls in zip(result["start_times"], result["ttfts"], result["itls"],
                                 strict=True):
        t = begin + ttft
        for gap in [0.0, *itls]:
            t += gap
            buckets[int(t - start)] = buckets.get(int(t - start), 0) + 1
    assert result["max_output_tokens_per_s"] == max(buckets.values())


def test_client_queue_statistics_only_under_a_concurrency_limit(exported):
    _, _, result, concurrency, _ = exported
    assert ("mean_client_queue_time_ms" in result) == (concurrency is not None)
    assert ("p99_e2el_including_client_queue_ms" in result) == (concurrency is not None)


def test_send_times_are_start_times_and_the_wait_is_the_queue_time(exported, tmp_path):
    root, _, _, _, _ = exported
    folder = tmp_path / "sent"
    folder.mkdir()
    for name in ("kvbench_summary.json", "config.json", "steps.csv", TOKENS_FILE):
        (folder / name).write_bytes((root / "paged" / name).read_bytes())
    frame = pd.read_csv(root / "paged" / "requests.csv")
    frame["sent_s"] = frame["arrival_s"] + 0.25 * frame["request_id"]
    frame.to_csv(folder / "requests.csv", index=False)
    out = tmp_path / "sent.json"
    assert main(["export", str(folder), "--format", "vllm-bench", "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    requests = frame.drop_duplicates("request_id")  # a row per sample: one send per request
    assert result["start_times"] == pytest.approx(list(requests["sent_s"]))
    assert result["queue_times"] == pytest.approx(list(0.25 * requests["request_id"]))


def test_peak_concurrency_counts_half_open_intervals():
    from kvbench.results.export import peak_concurrent_requests, peak_output_tokens_per_s

    # [0, 1) and [1, 2) never overlap; [0.5, 1.5) overlaps both
    assert peak_concurrent_requests(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == 1
    assert peak_concurrent_requests(np.array([0.0, 1.0, 0.5]),
                                    np.array([1.0, 2.0, 1.5])) == 2
    assert peak_output_tokens_per_s([np.array([0.1, 0.2, 1.5]), np.array([0.9])], 0.0) == 3


def test_repeats_are_one_configuration_s_runs(tmp_path):
    options = RunOptions.for_kind("simulate", strategy="paged,prefix", model="llama-2-7b",
                                  workload="uniform", num_requests=4, warmup=0, repeat=2,
                                  out=str(tmp_path / "kvbench"), defaults="classic")
    root = run_session(plan_session(options)).root
    sweep = tmp_path / "vllm"
    assert main(["export", str(root), "--format", "vllm-sweep", "-o", str(sweep)]) == 0
    for label in ("paged", "prefix"):
        records = json.loads((sweep / label / "summary.json").read_text())
        assert [r["run_number"] for r in records] == [0, 1]
        assert (sweep / label / "run=1.json").is_file()
        assert "itls" not in records[0] and "latencies" in records[0]  # as the sweep saves
    assert len(vllm_pareto_points(sweep)) == 4
