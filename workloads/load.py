"""`load_workload`: the one way to get a workload, built-in or trace file.

A built-in workload's generator (`entry.py`) or a trace reader (`trace_formats.py`) gives the
requests, arrivals are scaled (`time_scale`) or set by the arrival process (`arrivals.py`), the
requests are clipped to the model (`clip.py`), sorted by arrival (ties keep generation order)
and numbered in that order. A CSV trace comes as a `TraceTable` and does the same on its
columns (`trace_table.py`). What to tell the user (clipped requests, trace rows left out)
comes back in the `WorkloadResult`, not as Python warnings."""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads.arrivals import ArrivalProcess, apply_arrivals
from kvbench.workloads.bounds import check_arrival_span, check_workload_fits
from kvbench.workloads.clip import clip_to_max_len
from kvbench.workloads.entry import WORKLOADS
from kvbench.workloads.params import check_float, check_int
from kvbench.workloads.result import WorkloadResult
from kvbench.workloads.trace_formats import read_trace_source
from kvbench.workloads.trace_rows import TraceRowsSkippedWarning
from kvbench.workloads.trace_table import TraceTable, table_requests

TRACE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv")


def is_trace(name_or_path: str | os.PathLike[str]) -> bool:
    """True when `name_or_path` names a trace file rather than a built-in workload."""
    text = os.fspath(name_or_path)
    if text in WORKLOADS:
        return False
    return text.lower().endswith(TRACE_SUFFIXES) or os.sep in text or Path(text).is_file()


def parse_workload_params(name: str, items: Iterable[str]) -> dict[str, Any]:
    """`["n=8", "prompt_len=32,64"]` -> typed keyword arguments for workload `name`."""
    return WORKLOADS.get(name).parse_params(items)


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
    conversation_rate: float = math.inf,
    time_scale: float = 1.0,
    tokenizer: str | os.PathLike[str] | None = None,
    **params: Any,
) -> WorkloadResult:
    """Build a built-in workload or read a trace file (`is_trace` decides), apply arrivals and
    clipping.

    `num_requests` may be None only for a trace (then the whole file is used). `time_scale`
    multiplies every arrival time the workload gives (a trace's timestamps, chat think time):
    0.5 replays a trace twice as fast. `request_rate` (requests/s) or `conversation_rate`
    (conversations/s) sets when each conversation starts (`arrivals.py`). `tokenizer` is a
    Hugging Face tokenizer folder, needed by ShareGPT JSON datasets (ignored otherwise). `params` are the built-in workload's
    parameters (a trace takes none).
    """
    arrivals = ArrivalProcess(request_rate, burstiness, max_concurrency, conversation_rate)
    vocab_size = check_int("vocab_size", vocab_size)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise KvbenchInputError(f"--seed must be an integer, got {seed!r}")
    seed = int(seed)
    if num_requests is not None:
        num_requests = check_int("--num-requests", num_requests)
    name = os.fspath(name_or_path)
    if is_trace(name):
        if params:
            raise KvbenchInputError(
                f"a trace workload takes no parameters, got {', '.join(params)}"
            )
        source, notes = _read_trace(name, num_requests, seed, vocab_size, tokenizer,
                                    max_model_len)
        effective: dict[str, Any] = {}
    else:
        entry = WORKLOADS.get(name)
        effective = entry.with_defaults(params)
        if num_requests is None:
            raise KvbenchInputError(f"workload {name!r} needs --num-requests")
        notes = ()
        check_workload_fits(num_requests, 0, "--num-requests")
        source = entry.generator(num_requests, seed, vocab_size, **effective)

    time_scale = check_float("--time-scale", time_scale, 0.0, strict=True)
    if isinstance(source, TraceTable):
        # a CSV trace: each request built once, with its final fields (trace_table.py)
        requests, num_clipped = table_requests(source, time_scale, arrivals, seed,
                                               max_model_len)
    else:
        requests, num_clipped = _finish(source, time_scale, arrivals, seed, max_model_len)
    check_arrival_span(max((r.arrival_s for r in requests), default=0.0))
    return WorkloadResult(
        name=name,
        requests=requests,
        num_clipped=num_clipped,
        max_model_len=max_model_len,
        arrivals=arrivals,
        params=MappingProxyType(effective),
        notes=notes,
    )


def _finish(requests: list[Request], time_scale: float, arrivals: ArrivalProcess, seed: int,
            max_model_len: int | None) -> tuple[list[Request], int]:
    """A built-in workload's or a non-CSV trace's requests scaled, given arrivals, sorted,
    clipped and renumbered (a CSV trace's: `trace_table.table_requests`, the same)."""
    if time_scale != 1.0:
        requests = [replace(r, arrival_s=r.arrival_s * time_scale) for r in requests]
    requests = apply_arrivals(requests, arrivals.request_rate, arrivals.burstiness, seed,
                              arrivals.conversation_rate)
    requests, num_clipped = clip_to_max_len(requests, max_model_len)
    # (most already have their index: only the others are copied)
    return [r if r.request_id == i else replace(r, request_id=i)
            for i, r in enumerate(requests)], num_clipped


def _read_trace(
    path: str, num_requests: int | None, seed: int, vocab_size: int,
    tokenizer: str | os.PathLike[str] | None, max_model_len: int | None,
) -> tuple[list[Request] | TraceTable, tuple[str, ...]]:
    """The trace's requests (or table) and the readers' notes on rows left out (other
    warnings pass)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceRowsSkippedWarning)
        source = read_trace_source(path, num_requests, seed, vocab_size, tokenizer,
                                   max_model_len)
    for w in caught:
        if not issubclass(w.category, TraceRowsSkippedWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    notes = tuple(str(w.message) for w in caught
                  if issubclass(w.category, TraceRowsSkippedWarning))
    return source, notes
