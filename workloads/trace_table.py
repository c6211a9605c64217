"""A trace of unshared prompts (BurstGPT, Azure) as columns, made into requests once.

The row path (`load._finish`) builds a `Request` per row, then copies it for `time_scale`,
arrivals, clipping and numbering: over a million rows, millions of copies and their garbage. A
`TraceTable` keeps the rows as numpy columns until `load_workload` knows every final field,
then builds each request once (`table_requests`), with the same arrival times, order, clipping
and lazily drawn prompts as the row path (`tests/workloads/trace_reference.py` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvbench.core.request import Request
from kvbench.workloads.arrivals import ArrivalProcess, arrival_times
from kvbench.workloads.bounds import check_workload_fits, prompt_cap
from kvbench.workloads.clip import clip_lengths
from kvbench.workloads.prompt_tokens import LazyRows
from kvbench.workloads.request_build import build_requests
from kvbench.workloads.sampling import TokenSampler


@dataclass(frozen=True)
class TraceColumns:
    """A trace's replayed rows in file order: seconds on the trace's own clock, prompt and
    output token counts (float64, int64, int64)."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_len)


@dataclass(frozen=True)
class TraceTable:
    """A trace's requests before they are built: `arrival_s` relative to its earliest row,
    prompt lengths as built (at most the model's length), prompts drawn lazily from `rows`
    (row i is request i's prompt, in file order)."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    rows: LazyRows

    def __len__(self) -> int:
        return len(self.prompt_len)

    def requests(self) -> list[Request]:
        """The requests in file order, numbered so, arriving at `arrival_s`."""
        return build_requests(self.rows, np.arange(len(self)), self.prompt_len,
                              self.arrival_s, self.output_len)


def trace_table(path: Path, columns: TraceColumns, sampler: TokenSampler,
                max_model_len: int | None) -> TraceTable:
    """What `trace_rows.to_requests(rows, sampler.lazy_rows(prompt_lengths(...)))` gives, as
    a table: prompts capped to the model's length, the requests checked to fit in memory
    (the prompts' ids are checked when they are drawn)."""
    lengths = np.minimum(columns.prompt_len, prompt_cap(max_model_len))
    check_workload_fits(len(columns), 0, str(path))
    times = columns.arrival_s
    origin = times.min() if len(times) else 0.0
    return TraceTable(times - origin, lengths, columns.output_len, sampler.lazy_source(lengths))


def table_requests(table: TraceTable, time_scale: float, process: ArrivalProcess, seed: int,
                   max_model_len: int | None) -> tuple[list[Request], int]:
    """The requests `load_workload` gives for `table`, and how many were clipped: arrivals
    scaled by `time_scale` (already checked) or set by `process` (`apply_arrivals` with one
    request per conversation), sorted by arrival (ties in file order), clipped to
    `max_model_len` (`clip_to_max_len`), numbered in arrival order."""
    arrival = table.arrival_s
    if not process.offline:
        n = len(table)
        # each request is a conversation of one: start + (own time - own time) = start
        arrival = arrival_times(n, process.conversation_start_rate(n, n), process.burstiness,
                                seed)
    elif time_scale != 1.0:
        arrival = arrival * time_scale
    order = np.argsort(arrival, kind="stable")
    prompt_len = table.prompt_len[order]
    output_len = table.output_len[order]
    prompt_len, output_len, num_clipped = clip_lengths(prompt_len, output_len, max_model_len)
    requests = build_requests(table.rows, order, prompt_len, arrival[order], output_len)
    return requests, num_clipped
