"""A trace of unshared prompts (BurstGPT, Azure) as columns, made into requests once.

The row path (`load._finish`) copies each `Request` for `time_scale`, arrivals, clipping and
numbering: over a million rows, millions of copies and their garbage. A `TraceTable` keeps the
rows as numpy columns until `load_workload` knows every final field, then builds each request
once (`table_requests`), with the arrival times, order and clipping `apply_arrivals` and
`clip_to_max_len` give.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from kvbench.core.request import Request
from kvbench.workloads.arrivals import ArrivalProcess, arrival_times
from kvbench.workloads.clip import clip_lengths
from kvbench.workloads.prompt_tokens import LazyRows, PromptTokens

# Requests built at a time: the lists of plain values they are built from stay this short.
BLOCK = 1 << 16


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
        return self.build(np.arange(len(self)), self.prompt_len, self.arrival_s,
                          self.output_len)

    def build(self, rows: np.ndarray, prompt_len: np.ndarray, arrival_s: np.ndarray,
              output_len: np.ndarray) -> list[Request]:
        """Requests numbered 0, 1, ...: request k's prompt is the head of `prompt_len[k]` ids
        of row `rows[k]`, arriving at `arrival_s[k]` with `output_len[k]` output tokens.

        The cyclic garbage collector is paused meanwhile: the new objects hold no cycles, yet
        every few hundred allocations a collection would walk the young ones again."""
        out: list[Request] = []
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            for first in range(0, len(rows), BLOCK):
                block = slice(first, first + BLOCK)
                index = rows[block].tolist()
                prompts = list(map(PromptTokens, repeat(self.rows, len(index)), index,
                                   prompt_len[block].tolist()))
                out += map(Request, range(first, first + len(index)),
                           arrival_s[block].tolist(), prompts, output_len[block].tolist())
        finally:
            if was_enabled:
                gc.enable()
        return out


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
    prompt_len, output_len, num_clipped = clip_lengths(table.prompt_len[order],
                                                       table.output_len[order], max_model_len)
    return table.build(order, prompt_len, arrival[order], output_len), num_clipped
