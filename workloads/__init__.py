"""Workloads: deterministic (seeded) lists of requests.

A workload is built in four steps, each in its own module:

1. the generator (`chat.py`, `sharegpt.py`, `lmsys.py`, `summarize.py`, `prefix_repeat.py`,
   `parallel.py`, `uniform.py`) or a trace file (`trace_formats.py`: kvbench JSONL, Mooncake,
   Azure, BurstGPT, ShareGPT JSON) gives the requests, with `arrival_s` as an offset inside
   their conversation (0 for single requests) or the trace's own time, multiplied by
   `time_scale`;
2. the arrival process (`arrivals.py`) sets when each request (conversation) starts;
3. clipping (`clip.py`) fits every request into the model's maximum length and counts the
   clipped ones;
4. the requests are sorted by arrival (ties keep generation order) and renumbered, so that
   `request_id` is the position in arrival order.

`load_workload` returns all of that as a `WorkloadResult`; `build_workload` returns only the
request list and reports clipping as a `ClippedRequestsWarning`.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads import chat, lmsys, parallel, prefix_repeat, sharegpt, summarize, uniform
from kvbench.workloads.arrivals import ArrivalProcess, apply_arrivals, arrival_times
from kvbench.workloads.clip import ClippedRequestsWarning, clip_message, clip_to_max_len
from kvbench.workloads.params import check_float, check_int, check_known, parse_params
from kvbench.workloads.trace import load_trace, write_trace
from kvbench.workloads.trace_formats import detect_trace_format, read_trace
from kvbench.workloads.trace_rows import TraceRowsSkippedWarning


@dataclass(frozen=True)
class WorkloadInfo:
    """A built-in workload: its name, a one-line summary, its builder and its parameters."""

    name: str
    summary: str
    build: Callable[..., list[Request]]
    params: Mapping[str, Any] = field(default_factory=dict)  # name -> default


def _info(name: str, module: Any, build: Callable[..., list[Request]]) -> WorkloadInfo:
    return WorkloadInfo(name, module.SUMMARY, build, MappingProxyType(dict(module.DEFAULTS)))


WORKLOADS: dict[str, WorkloadInfo] = {
    "chat": _info("chat", chat, chat.build_chat),
    "sharegpt": _info("sharegpt", sharegpt, sharegpt.build_sharegpt),
    "lmsys": _info("lmsys", lmsys, lmsys.build_lmsys),
    "summarize": _info("summarize", summarize, summarize.build_summarize),
    "prefix-repeat": _info("prefix-repeat", prefix_repeat, prefix_repeat.build_prefix_repeat),
    "parallel": _info("parallel", parallel, parallel.build_parallel),
    "uniform": _info("uniform", uniform, uniform.build_uniform),
}

TRACE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv")


@dataclass(frozen=True)
class WorkloadResult:
    """A loaded workload: requests sorted by arrival, plus what the runner reports."""

    name: str  # built-in name or trace path
    requests: list[Request]
    num_clipped: int  # requests shortened to fit max_model_len
    max_model_len: int | None
    arrivals: ArrivalProcess
    params: Mapping[str, Any]  # the generator's parameters, defaults filled in ({} for traces)
    notes: tuple[str, ...] = ()  # what a trace reader left out (e.g. BurstGPT's failed rows)

    @property
    def max_concurrency(self) -> int | None:
        """Closed-loop limit for the runner to enforce (None: open loop)."""
        return self.arrivals.max_concurrency

    @property
    def clip_message(self) -> str | None:
        if not self.num_clipped or self.max_model_len is None:
            return None
        return clip_message(self.num_clipped, len(self.requests), self.max_model_len)


def is_trace(name_or_path: str | os.PathLike[str]) -> bool:
    """True when `name_or_path` names a trace file rather than a built-in workload."""
    text = os.fspath(name_or_path)
    if text in WORKLOADS:
        return False
    return text.lower().endswith(TRACE_SUFFIXES) or os.sep in text or Path(text).is_file()


def parse_workload_params(name: str, items: Iterable[str]) -> dict[str, Any]:
    """`["n=8", "prompt_len=32,64"]` -> typed keyword arguments for workload `name`."""
    info = _lookup(name)
    return parse_params(name, items, info.params)


def _lookup(name: str) -> WorkloadInfo:
    info = WORKLOADS.get(name)
    if info is None:
        raise KvbenchInputError(
            f"unknown workload {name!r} (workloads: {', '.join(WORKLOADS)}; or a trace file)"
        )
    return info


def load_workload(
    name_or_path: str | os.PathLike[str],
    num_requests: int | None,
    seed: int,
    vocab_size: int,
    *,
    max_model_len: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    time_scale: float = 1.0,
    tokenizer: str | os.PathLike[str] | None = None,
    **params: Any,
) -> WorkloadResult:
    """Build a built-in workload or read a trace file, apply arrivals and clipping.

    `num_requests` may be None only for a trace (then the whole file is used). `time_scale`
    multiplies every arrival time the workload gives (a trace's timestamps, chat think time):
    0.5 replays a trace twice as fast. `tokenizer` is a Hugging Face tokenizer folder, needed
    by ShareGPT JSON datasets (ignored otherwise).
    """
    arrivals = ArrivalProcess(request_rate, burstiness, max_concurrency)
    vocab_size = check_int("vocab_size", vocab_size)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise KvbenchInputError(f"--seed must be an integer, got {seed!r}")
    seed = int(seed)
    if num_requests is not None:
        num_requests = check_int("--num-requests", num_requests)
    if is_trace(name_or_path):
        if params:
            raise KvbenchInputError(
                f"a trace workload takes no parameters, got {', '.join(params)}"
            )
        name = os.fspath(name_or_path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TraceRowsSkippedWarning)
            requests = read_trace(name, num_requests, seed, vocab_size, tokenizer)
        for w in caught:
            if not issubclass(w.category, TraceRowsSkippedWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        notes = tuple(str(w.message) for w in caught
                      if issubclass(w.category, TraceRowsSkippedWarning))
        effective: dict[str, Any] = {}
    else:
        name = os.fspath(name_or_path)
        info = _lookup(name)
        check_known(name, params, info.params)
        if num_requests is None:
            raise KvbenchInputError(f"workload {name!r} needs --num-requests")
        effective = {**info.params, **params}
        notes = ()
        requests = info.build(num_requests=num_requests, seed=seed, vocab_size=vocab_size, **params)

    time_scale = check_float("--time-scale", time_scale, 0.0, strict=True)
    if time_scale != 1.0:
        requests = [replace(r, arrival_s=r.arrival_s * time_scale) for r in requests]
    requests = apply_arrivals(requests, arrivals.request_rate, arrivals.burstiness, seed)
    requests, num_clipped = clip_to_max_len(requests, max_model_len)
    requests = [replace(r, request_id=i) for i, r in enumerate(requests)]
    return WorkloadResult(
        name=name,
        requests=requests,
        num_clipped=num_clipped,
        max_model_len=max_model_len,
        arrivals=arrivals,
        params=MappingProxyType(effective),
        notes=notes,
    )


def build_workload(
    name_or_path: str | os.PathLike[str],
    num_requests: int | None,
    seed: int,
    vocab_size: int,
    *,
    max_model_len: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    time_scale: float = 1.0,
    tokenizer: str | os.PathLike[str] | None = None,
    **params: Any,
) -> list[Request]:
    """The requests of a workload, sorted by arrival time (`request_id` = position).

    Clipped requests are reported with a `ClippedRequestsWarning` naming how many, rows a
    trace reader left out with a `TraceRowsSkippedWarning`.
    """
    result = load_workload(
        name_or_path,
        num_requests,
        seed,
        vocab_size,
        max_model_len=max_model_len,
        request_rate=request_rate,
        burstiness=burstiness,
        time_scale=time_scale,
        tokenizer=tokenizer,
        **params,
    )
    for note in result.notes:
        warnings.warn(note, TraceRowsSkippedWarning, stacklevel=2)
    if result.clip_message:
        warnings.warn(result.clip_message, ClippedRequestsWarning, stacklevel=2)
    return result.requests


__all__ = [
    "ArrivalProcess",
    "ClippedRequestsWarning",
    "Request",
    "TraceRowsSkippedWarning",
    "WORKLOADS",
    "WorkloadInfo",
    "WorkloadResult",
    "apply_arrivals",
    "arrival_times",
    "build_workload",
    "clip_to_max_len",
    "detect_trace_format",
    "is_trace",
    "load_trace",
    "load_workload",
    "parse_workload_params",
    "read_trace",
    "write_trace",
]
