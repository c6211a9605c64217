"""The workload of a CSV trace built through the generic path: its rows read, a `Request` per
row, then `load._finish`'s copies of each (the time scale, the arrival process, clipping and
its number). Tests compare the one-build path (`trace_table.py`) with it, field by field."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

from kvbench.core.request import Request
from kvbench.workloads.arrivals import ArrivalProcess
from kvbench.workloads.csv_trace import CsvFormat, read_csv_columns
from kvbench.workloads.load import _finish
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import TraceRow, prompt_lengths, to_requests


def reference_workload(path: Path, fmt: CsvFormat, num_requests: int | None, seed: int,
                       vocab_size: int, *, max_model_len: int | None = None,
                       time_scale: float = 1.0, request_rate: float = math.inf,
                       burstiness: float = 1.0) -> tuple[list[Request], int]:
    """The requests and the count of clipped ones, the old way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns, _ = read_csv_columns(path, fmt, num_requests)
    rows = [TraceRow(a, p, o) for a, p, o in zip(columns.arrival_s.tolist(),
                                                 columns.prompt_len.tolist(),
                                                 columns.output_len.tolist(), strict=True)]
    sampler = TokenSampler(rng_for(seed, fmt.tokens_stream), vocab_size)
    requests = to_requests(rows, sampler.lazy_rows(
        prompt_lengths(path, rows, max_model_len, drawn_now=False)))
    return _finish(requests, time_scale, ArrivalProcess(request_rate, burstiness), seed,
                   max_model_len)


def request_fields(request: Request) -> tuple:
    """A request's fields without drawing its prompt: times as their exact bits, the prompt
    as its row and length (and the types, which must not change either)."""
    prompt = request.prompt_token_ids
    return (request.request_id, type(request.request_id), request.arrival_s.hex(),
            type(request.arrival_s), request.output_len, type(request.output_len), request.n,
            request.prefix_id, request.conversation_id, type(prompt), prompt._index,
            len(prompt), vars(request).keys())
