"""The workload of a CSV trace built the generic way: its rows read, a `Request` per row, then
copies of each for the time scale, the arrival process (`apply_arrivals`), clipping
(`clip_to_max_len`) and numbering. Tests compare the one-build path (`trace_table.py`) with
it, field by field."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvbench.core.request import Request
from kvbench.workloads import apply_arrivals, clip_to_max_len
from kvbench.workloads.bounds import prompt_cap
from kvbench.workloads.csv_trace import CsvFormat, read_csv_columns
from kvbench.workloads.sampling import TokenSampler, rng_for


def reference_workload(path: Path, fmt: CsvFormat, num_requests: int | None, seed: int,
                       vocab_size: int, *, max_model_len: int | None = None,
                       time_scale: float = 1.0, request_rate: float = math.inf,
                       burstiness: float = 1.0) -> tuple[list[Request], int]:
    """The requests and the count of clipped ones, the old way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (times, prompt_len, output_len), _ = read_csv_columns(path, fmt, num_requests)
    sampler = TokenSampler(rng_for(seed, fmt.tokens_stream), vocab_size)
    prompts = sampler.lazy_rows(np.minimum(prompt_len, prompt_cap(max_model_len)))
    origin = min(times.tolist())
    requests = [Request(i, t - origin, prompt, out) for i, (t, prompt, out) in
                enumerate(zip(times.tolist(), prompts, output_len.tolist(), strict=True))]
    if time_scale != 1.0:
        requests = [replace(r, arrival_s=r.arrival_s * time_scale) for r in requests]
    requests = apply_arrivals(requests, request_rate, burstiness, seed)
    requests, num_clipped = clip_to_max_len(requests, max_model_len)
    return [replace(r, request_id=i) for i, r in enumerate(requests)], num_clipped


def request_fields(request: Request) -> tuple:
    """A request's fields without drawing its prompt: times as their exact bits, the prompt
    as its row and length (and the types, which must not change either)."""
    prompt = request.prompt_token_ids
    return (request.request_id, type(request.request_id), request.arrival_s.hex(),
            type(request.arrival_s), request.output_len, type(request.output_len), request.n,
            request.prefix_id, request.conversation_id, type(prompt), prompt._index,
            len(prompt), vars(request).keys())
