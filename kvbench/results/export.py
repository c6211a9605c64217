"""A results folder in other tools' formats: `vllm bench serve --save-result` JSON, and one
CSV row per request for pandas.

The vLLM form has the keys vLLM's serving benchmark saves, with vLLM's units and statistics:
latency lists in seconds (`ttfts` per request, `itls` a list of gaps per request), summary
figures in milliseconds as mean, median, std (population, as numpy's default) and p99 of
TTFT, TPOT, ITL and E2E latency over completed requests. Throughputs and duration are
kvbench's own (over the makespan, docs/design.md "Metrics"), so they equal `summary.json`.
kvbench keeps token ids, not text: `generated_texts` holds empty strings.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvbench.errors import KvbenchInputError
from kvbench.results.summary import Summary
from kvbench.results.token_times import TOKENS_FILE, read_token_times, token_gaps_s

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}  # vLLM -> kvbench


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
    token_times: dict[int, list[list[float]]] | None  # None: no tokens.jsonl (older folder)

    @classmethod
    def read(cls, folder: Path) -> RunFiles:
        folder = Path(folder)
        summary = Summary.from_json(folder / "summary.json")
        config: dict[str, Any] = {}
        if (folder / "config.json").is_file():
            try:
                config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise KvbenchInputError(f"cannot read {folder / 'config.json'}: {err}") from None
        requests = None
        if (folder / "requests.csv").is_file():
            try:
                requests = pd.read_csv(folder / "requests.csv").sort_values("request_id")
            except (OSError, ValueError, KeyError, pd.errors.EmptyDataError) as err:
                raise KvbenchInputError(f"cannot read {folder / 'requests.csv'}: {err}") from None
        return cls(folder, summary, config if isinstance(config, dict) else {}, requests,
                   read_token_times(folder))

    def itls_s(self, request_id: int, sample: int | None = None) -> list[float]:
        """Every gap between consecutive tokens of one request's samples (or of one sample,
        a `requests.csv` row), in seconds."""
        gaps: list[float] = []
        for index, times in enumerate((self.token_times or {}).get(request_id, [])):
            if sample is None or index == sample:
                gaps.extend(token_gaps_s(times))
        return gaps

    def row_itls_s(self, frame: pd.DataFrame) -> list[list[float]]:
        """`itls_s` of each row of a `requests.csv` frame: its sample's (one row per sample),
        or its request's in a folder from before the `sample` column."""
        samples = frame["sample"] if "sample" in frame else [None] * len(frame)
        return [self.itls_s(int(r), None if s is None else int(s))
                for r, s in zip(frame["request_id"], samples, strict=True)]


def _stats_ms(values_ms: list[float] | np.ndarray) -> dict[str, float]:
    arr = np.asarray(values_ms, dtype=float)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:  # vLLM: statistics of an empty sample are 0
        return {"mean": 0.0, "median": 0.0, "std": 0.0, "p99": 0.0}
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


def vllm_bench_result(folder: Path) -> Export:
    """The run in `vllm bench serve --save-result` form (see the module docstring)."""
    run = RunFiles.read(folder)
    s, cfg = run.summary, run.config.get("run") or {}
    missing: list[str] = []
    data: dict[str, Any] = {
        "date": _date(run.config),
        "backend": "kvbench",
        "label": s.label,
        "model_id": s.model,
        "tokenizer_id": cfg.get("tokenizer") or s.model,
        "num_prompts": s.num_requests,
        "request_rate": cfg.get("request_rate", "inf"),
        "burstiness": cfg.get("burstiness", 1.0),
        "max_concurrency": cfg.get("max_concurrency"),
        "duration": s.duration_s,
        "completed": s.completed,
        "failed": s.failed,
    }
    per_request: dict[str, Any] = {}
    stats: dict[str, dict[str, float] | None] = dict.fromkeys(LATENCIES)
    if run.requests is not None and not run.requests.empty:
        frame = run.requests
        done = frame[frame["completed"].astype(bool)]
        ids = [int(i) for i in frame["request_id"]]
        per_request = {
            "input_lens": [int(v) for v in frame["prompt_len"]],
            "output_lens": [int(v) if ok else 0 for v, ok in
                            zip(frame["output_tokens"], frame["completed"], strict=True)],
            "ttfts": [float(v) / 1e3 if ok and not pd.isna(v) else 0.0 for v, ok in
                      zip(frame["ttft_ms"], frame["completed"], strict=True)],
        }
        data["total_input_tokens"] = int(done["prompt_len"].sum())
        data["total_output_tokens"] = int(done["output_tokens"].sum())
        stats["ttft"] = _stats_ms(done["ttft_ms"].to_numpy(dtype=float))
        stats["tpot"] = _stats_ms(done["tpot_ms"].to_numpy(dtype=float))
        stats["e2el"] = _stats_ms(done["e2e_ms"].to_numpy(dtype=float))
        if run.token_times is not None:
            per_request["itls"] = run.row_itls_s(frame)
            stats["itl"] = _stats_ms([g * 1e3 for gaps in run.row_itls_s(done) for g in gaps])
        else:
            missing.append("itls")
        per_request["generated_texts"] = [""] * len(ids)
        per_request["errors"] = ["" if ok else f"not completed (run {s.status or 'unknown'})"
                                 for ok in frame["completed"]]
    else:
        missing += ["total_input_tokens", "total_output_tokens", "input_lens", "output_lens",
                    "ttfts", "itls", "generated_texts", "errors"]
    data["request_throughput"] = s.throughput.requests_s
    data["request_goodput"] = s.goodput.goodput_requests_s if s.goodput else None
    data["output_throughput"] = s.throughput.output_tok_s
    data["total_token_throughput"] = s.throughput.total_tok_s
    data.update(per_request)
    for vllm_name, ours in LATENCIES.items():
        figures = stats[vllm_name]
        if figures is None:  # no per-request data: what summary.json has (no std)
            kept = s.latency_ms.get(ours)
            figures = {"mean": kept.mean, "median": kept.p50, "p99": kept.p99}
            missing.append(f"std_{vllm_name}_ms")
        for stat in ("mean", "median", "std", "p99"):
            if stat in figures:
                data[f"{stat}_{vllm_name}_ms"] = figures[stat]
    order = [k for k in _VLLM_KEYS if k in data] + [k for k in data if k not in _VLLM_KEYS]
    return Export({k: data[k] for k in order}, missing)


# The order vLLM writes them in (its result dict, then the run's settings).
_VLLM_KEYS = (
    "date", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "generated_texts",
    "errors",
    *(f"{stat}_{name}_ms" for name in LATENCIES for stat in ("mean", "median", "std", "p99")),
)


def request_table(folders: list[Path]) -> Export:
    """One row per request of each run (`requests.csv` with the run's label in front, and
    each request's ITL mean and max when the folder keeps token times)."""
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


__all__ = ["Export", "RunFiles", "request_table", "vllm_bench_result"]
