"""A results folder in other tools' formats: `vllm bench serve --save-result` JSON (every key,
with vLLM's types, units and formulas; an n > 1 request one merged stream), vLLM's sweep
layout, and one CSV row per request for pandas (results/README.md, The vLLM export).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvbench.errors import KvbenchInputError
from kvbench.results.metrics import per_request
from kvbench.results.summary import Summary, read_json_object, summary_file
from kvbench.results.token_times import TOKENS_FILE, read_token_times, token_gaps_s

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}  # vLLM -> kvbench
STATS = ("mean", "median", "std", "p99")
# What `vllm bench serve` names the backend and endpoint of a run: kvbench's own engine.
BACKEND = "kvbench"
# The file name vLLM's sweep plotters (`vllm bench sweep plot`, `plot_pareto`) read: every
# `summary.json` under the folder they are given, each a JSON list of run records.
VLLM_SWEEP_SUMMARY = "summary.json"


@dataclass
class Export:
    """The exported object and the keys that could not be filled from the folder."""

    data: dict[str, Any]
    missing: list[str] = field(default_factory=list)


@dataclass
class RunFiles:
    """What an export reads from one run folder."""

    folder: Path
    summary: Summary
    config: dict[str, Any]
    requests: pd.DataFrame | None  # None: no requests.csv
    token_times: dict[int, list[list[float]]] | None  # None: no token file (older folder)

    @classmethod
    def read(cls, folder: Path) -> RunFiles:
        folder = Path(folder)
        summary = Summary.of_folder(folder)
        config = (read_json_object(folder / "config.json")
                  if (folder / "config.json").is_file() else {})
        requests = None
        if (folder / "requests.csv").is_file():
            try:
                requests = pd.read_csv(folder / "requests.csv").sort_values("request_id")
            except (OSError, ValueError, KeyError, pd.errors.EmptyDataError) as err:
                raise KvbenchInputError(f"cannot read {folder / 'requests.csv'}: {err}") from None
        return cls(folder, summary, config, requests, read_token_times(folder))

    def row_itls_s(self, frame: pd.DataFrame) -> list[list[float]]:
        """The gaps between consecutive tokens (seconds) of each row of a `requests.csv`
        frame: its sample's, or its request's in a folder from before the `sample` column."""
        samples = frame["sample"] if "sample" in frame else [None] * len(frame)
        return [[gap for index, times in enumerate(self.token_times.get(int(r), []))
                 if s is None or index == int(s) for gap in token_gaps_s(times)]
                for r, s in zip(frame["request_id"], samples, strict=True)]

    def stream_itls_s(self, request_id: int) -> list[float]:
        """The gaps of the request's response stream: every sample's tokens merged in time
        order, as vLLM's client receives an n > 1 response (one sample: its own gaps)."""
        samples = (self.token_times or {}).get(request_id, [])
        if len(samples) == 1:
            return token_gaps_s(samples[0])
        merged = np.sort(np.concatenate([np.asarray(t, dtype=float) for t in samples])) \
            if samples else np.empty(0)
        return np.diff(merged).tolist()


def _stats_ms(values_ms: list[float] | np.ndarray) -> dict[str, float]:
    arr = np.asarray(values_ms, dtype=float)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:  # vLLM: statistics of an empty sample are 0
        return dict.fromkeys(STATS, 0.0)
    return {"mean": float(arr.mean()), "median": float(np.median(arr)),
            "std": float(arr.std()), "p99": float(np.percentile(arr, 99))}


def _date(config: dict[str, Any]) -> str:
    """vLLM's `%Y%m%d-%H%M%S`, from when the run was made."""
    created = config.get("created")
    if isinstance(created, str):
        try:
            return time.strftime("%Y%m%d-%H%M%S", time.strptime(created, "%Y-%m-%dT%H:%M:%S%z"))
        except ValueError:
            pass
    return ""


def _request_rate(value: Any) -> float | str:
    """vLLM's spelling: a float, or the string "inf" for all-at-once."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return "inf"
    return "inf" if math.isinf(rate) else rate


def peak_output_tokens_per_s(token_times_s: list[np.ndarray], start_s: float) -> float:
    """vLLM's `max_output_tokens_per_s`: the most output tokens in one whole second counted
    from the first request's start (second buckets, `int(t - start)`)."""
    if not token_times_s:
        return 0.0
    times = np.concatenate(token_times_s) - start_s
    if times.size == 0:
        return 0.0
    buckets = np.floor(times[times >= 0]).astype(np.int64)
    return float(np.bincount(buckets).max()) if buckets.size else 0.0


def peak_concurrent_requests(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """vLLM's `max_concurrent_requests` (`calculate_concurrency`): the most requests in flight
    at once over half-open intervals [start, end) (a request that ends as another starts does
    not overlap it; a zero-latency one is empty)."""
    if start_s.size == 0:
        return 0
    times = np.concatenate([start_s, end_s])
    deltas = np.concatenate([np.ones(start_s.size, dtype=np.int64),
                             -np.ones(end_s.size, dtype=np.int64)])
    order = np.lexsort((deltas, times))  # at one instant, departures (-1) first
    return int(max(0, np.cumsum(deltas[order]).max()))


def vllm_bench_result(folder: Path | RunFiles) -> Export:
    """The run in `vllm bench serve --save-result --save-detailed` form (module docstring)."""
    run = folder if isinstance(folder, RunFiles) else RunFiles.read(folder)
    s, cfg = run.summary, run.config.get("run") or {}
    missing: list[str] = []
    max_concurrency = cfg.get("max_concurrency")
    request_rate = _request_rate(cfg.get("request_rate", "inf"))
    data: dict[str, Any] = {
        "date": _date(run.config),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": s.label,
        "model_id": s.model,
        "tokenizer_id": cfg.get("tokenizer") or s.model,
        "num_prompts": s.num_requests,
        "request_rate": request_rate,
        "burstiness": cfg.get("burstiness", 1.0),
        "max_concurrency": int(max_concurrency) if max_concurrency is not None else None,
        "duration": s.duration_s,
        "completed": s.completed,
        "failed": s.failed,
    }
    lists: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    stats: dict[str, dict[str, float] | None] = dict.fromkeys(LATENCIES)
    if run.requests is not None and not run.requests.empty:
        requests = per_request(run.requests)
        lists, stats, extra = _per_request(run, requests, max_concurrency, request_rate,
                                                 missing)
        data["total_input_tokens"] = sum(
            n for n, ok in zip(lists["input_lens"], requests["completed"], strict=True) if ok)
        data["total_output_tokens"] = sum(lists["output_lens"])
    else:
        missing += ["total_input_tokens", "total_output_tokens", "input_lens", "output_lens",
                    "ttfts", "itls", "latencies", "start_times", "queue_times",
                    "generated_texts", "errors", "max_output_tokens_per_s",
                    "max_concurrent_requests"]
    data["request_throughput"] = s.throughput.requests_s
    data["request_goodput"] = s.goodput.goodput_requests_s if s.goodput else None
    data["output_throughput"] = s.throughput.output_tok_s
    data["total_token_throughput"] = s.throughput.total_tok_s
    data.update(lists)
    data["rtfx"] = 0.0  # vLLM's inverse real-time factor of audio input: kvbench has none
    for vllm_name, ours in LATENCIES.items():
        figures = stats[vllm_name]
        if figures is None:  # no per-request data: what kvbench_summary.json has (no std)
            kept = s.latency_ms.get(ours)
            figures = {"mean": kept.mean, "median": kept.p50, "p99": kept.p99}
            missing.append(f"std_{vllm_name}_ms")
        for stat in STATS:
            if stat in figures:
                data[f"{stat}_{vllm_name}_ms"] = figures[stat]
    data.update(extra)
    order = [k for k in _VLLM_KEYS if k in data] + [k for k in data if k not in _VLLM_KEYS]
    return Export({k: data[k] for k in order}, missing)


def _per_request(run: RunFiles, frame: pd.DataFrame, max_concurrency: int | None,
                 request_rate: float | str,
                 missing: list[str]) -> tuple[dict[str, Any], dict, dict[str, Any]]:
    """vLLM's per-request lists (from `frame`, one row per request), its latency statistics and
    its peak figures (and, under a concurrency limit, the client-side queue statistics it
    adds)."""
    ok = [bool(v) for v in frame["completed"]]
    ids = [int(i) for i in frame["request_id"]]
    arrival = frame["arrival_s"].to_numpy(dtype=float)
    # The clock of a request starts when it is sent (a slot free under --max-concurrency);
    # a folder that records no send time sent each request at its arrival.
    sent = frame["sent_s"].to_numpy(dtype=float) if "sent_s" in frame else arrival
    # A request never sent (an interrupted run) has vLLM's default start, 0.0.
    sent = np.where(np.isfinite(sent), sent, 0.0)
    arrival = np.where(np.isfinite(arrival), arrival, sent)
    ttft_s, latency_s = ([float(v) / 1e3 if good and not pd.isna(v) else 0.0
                          for v, good in zip(frame[name], ok, strict=True)]
                         for name in ("ttft_ms", "e2e_ms"))
    output_lens = [int(v) if good else 0 for v, good in zip(frame["output_tokens"], ok,
                                                              strict=True)]
    queue_s = [float(b - a) for a, b in zip(arrival, sent, strict=True)]
    lists: dict[str, Any] = {
        "input_lens": [int(v) for v in frame["prompt_len"]],
        "output_lens": output_lens,
        "ttfts": ttft_s,
    }
    stats: dict[str, dict[str, float] | None] = dict.fromkeys(LATENCIES)
    done = [i for i, good in enumerate(ok) if good]
    stats["ttft"] = _stats_ms([ttft_s[i] * 1e3 for i in done])
    # vLLM's TPOT: the request's time after its first token over its other output tokens
    stats["tpot"] = _stats_ms([(latency_s[i] - ttft_s[i]) / (output_lens[i] - 1) * 1e3
                               for i in done if output_lens[i] > 1])
    stats["e2el"] = _stats_ms([latency_s[i] * 1e3 for i in done])
    peaks: dict[str, Any] = {}
    start = np.asarray([float(sent[i]) for i in done])
    end = start + np.asarray([latency_s[i] for i in done])
    if run.token_times is not None:
        itls = [run.stream_itls_s(i) if good else [] for i, good in zip(ids, ok, strict=True)]
        lists["itls"] = itls
        stats["itl"] = _stats_ms([g * 1e3 for i in done for g in itls[i]])
        token_times = [float(sent[i]) + ttft_s[i]
                       + np.concatenate([[0.0], np.cumsum(itls[i])]) for i in done]
        peaks["max_output_tokens_per_s"] = peak_output_tokens_per_s(
            token_times, float(start.min()) if start.size else 0.0)
    else:
        missing += ["itls", "max_output_tokens_per_s"]
    lists["latencies"] = latency_s
    lists["start_times"] = [float(v) for v in sent]
    lists["queue_times"] = queue_s
    lists["generated_texts"] = [""] * len(ids)
    lists["errors"] = ["" if good else f"not completed (run {run.summary.status or 'unknown'})"
                       for good in ok]
    peaks["max_concurrent_requests"] = peak_concurrent_requests(start, end)
    lists.update(peaks)
    extra: dict[str, Any] = {}
    if max_concurrency is not None:  # vLLM adds these only under a concurrency limit
        queue = [queue_s[i] * 1e3 for i in done]
        for stat, value in _stats_ms(queue).items():
            extra[f"{stat}_client_queue_time_ms"] = value
        if request_rate != "inf":
            with_queue = [(latency_s[i] + queue_s[i]) * 1e3 for i in done]
            for stat, value in _stats_ms(with_queue).items():
                extra[f"{stat}_e2el_including_client_queue_ms"] = value
    return lists, stats, extra


# The order vLLM writes them in (the run's settings, then its result dict, then statistics).
_VLLM_KEYS = (
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
    "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{stat}_{name}_ms" for name in LATENCIES for stat in STATS),
)

# `vllm bench sweep serve` runs without `--save-detailed`, so its records drop these lists.
_DETAILED_ONLY = ("input_lens", "output_lens", "start_times", "ttfts", "itls",
                  "generated_texts", "errors")


def vllm_sweep_files(folders: list[Path]) -> tuple[dict[str, str], list[str]]:
    """The runs laid out as `vllm bench sweep serve` leaves its results, so that `vllm bench
    sweep plot` and `plot_pareto` read them: one folder per configuration (a strategy's
    label) holding `run=K.json` per repeat and `summary.json`, the JSON list of those records.

    Each record is the run's vLLM result without the per-request lists (as the sweep saves
    it), with `run_number` and the run's engine options under their own names (as vLLM merges
    a combination's parameters in: `tensor_parallel_size` is how `plot_pareto` counts GPUs).
    Returns (relative path -> text, keys that could not be filled)."""
    files: dict[str, str] = {}
    missing: list[str] = []
    for name, runs in _configurations(folders).items():
        records = []
        for number, folder in enumerate(runs):
            run = RunFiles.read(folder)
            result = vllm_bench_result(run)
            missing += [key for key in result.missing if key not in missing]
            record = {k: v for k, v in result.data.items() if k not in _DETAILED_ONLY}
            record["run_number"] = number
            engine = (run.config.get("run") or {}).get("engine") or {}
            record.update({k: v for k, v in engine.items() if k not in record})
            records.append(record)
            files[f"{name}/run={number}.json"] = json.dumps(record, indent=4) + "\n"
        files[f"{name}/{VLLM_SWEEP_SUMMARY}"] = json.dumps(records, indent=4) + "\n"
    return files, missing


def _configurations(folders: list[Path]) -> dict[str, list[Path]]:
    """Configuration name (the strategy's label) -> its runs: a `--repeat N` strategy's
    `rep-1` ... `rep-N` are one configuration's runs, as vLLM's `--num-runs`."""
    out: dict[str, list[Path]] = {}
    for folder in folders:
        folder = Path(folder)
        if folder.name.startswith("rep-") and (folder.parent / "repeat.json").is_file():
            reps = sorted((p for p in folder.parent.iterdir()
                           if p.name.startswith("rep-") and summary_file(p) is not None),
                          key=lambda p: int(p.name.removeprefix("rep-")))
            out[folder.parent.name] = reps
        else:
            summary = Summary.of_folder(folder)
            # the label, or the folder's own name where runs share one (a sweep's points)
            name = summary.label or folder.name
            out[folder.name if name in out else name] = [folder]
    return out


def request_table(folders: list[Path]) -> Export:
    """Every row of each run's `requests.csv` (one per sample of a request), the run's label
    in front, and each row's ITL mean and max when the folder keeps token times."""
    frames, missing = [], []
    for folder in folders:
        run = RunFiles.read(folder)
        if run.requests is None:
            raise KvbenchInputError(f"{folder} has no requests.csv to export")
        frame = run.requests.copy()
        frame.insert(0, "label", run.summary.label or Path(folder).name)
        if run.token_times is not None:
            gaps = [np.asarray(g, dtype=float) * 1e3 for g in run.row_itls_s(frame)]
            frame["itl_mean_ms"] = [g.mean() if g.size else None for g in gaps]
            frame["itl_max_ms"] = [g.max() if g.size else None for g in gaps]
        else:
            missing.append(f"itl_mean_ms, itl_max_ms of {folder} (no {TOKENS_FILE})")
        frames.append(frame)
    return Export({"frame": pd.concat(frames, ignore_index=True)}, missing)
