"""Mooncake traces (kvcache-ai/Mooncake, FAST'25): JSONL with block hashes of the prompt.

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

`timestamp` is in milliseconds; each hash id names one 512-token block of the prompt. Block id
h is always the same 512 seeded random ids and a prompt is its blocks' tokens in order, cut to
`input_length` (fresh random tokens past what its ids cover), so a prefix cache finds exactly
the sharing the trace describes. Lines with 0 input or output tokens are left out with a
`TraceRowsSkippedWarning` (docs/workloads.md, Mooncake).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.core.request import Request
from kvbench.workloads.bounds import check_workload_fits, prompt_cap
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    RowError,
    check_not_empty,
    count,
    read_rows,
    seconds,
    warn_skipped,
)

BLOCK_TOKENS = 512  # tokens per hash id in the published Mooncake traces


def looks_like_mooncake(first: dict[str, Any]) -> bool:
    return "hash_ids" in first or ("input_length" in first and "output_length" in first)


def _parse(obj: Any) -> tuple[float | None, int, int, list[int]]:
    """(arrival in seconds or None, prompt and output tokens, hash ids) of one line."""
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {type(obj).__name__}")
    for key, what in (("input_length", "the prompt's tokens: hash_ids give only its blocks"),
                      ("output_length", "the tokens to generate")):
        if key not in obj:
            raise RowError(f"needs {key} ({what})")
    hash_ids = obj.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise RowError("hash_ids must be a list of integers")
    arrival = obj.get("timestamp")
    return (None if arrival is None else seconds(arrival, "timestamp", 1e-3),
            count(obj["input_length"], "input_length"),
            count(obj["output_length"], "output_length"), hash_ids)


def load_mooncake(
    path: Path, num_requests: int | None, seed: int, vocab_size: int,
    max_model_len: int | None = None,
) -> list[Request]:
    rows, skipped = read_rows(
        path, _parse, num_requests, lambda timed: "timestamp on some lines only: give it on "
        "every line or none", keep=lambda row: row[1] > 0 and row[2] > 0)
    check_not_empty(path, len(rows))
    warn_skipped(path, skipped, len(rows), "input_length or output_length 0")

    cap = prompt_cap(max_model_len)
    check_workload_fits(len(rows), sum(min(row[1], cap) for row in rows), str(path))
    origin = min(row[0] for row in rows) if rows[0][0] is not None else 0.0
    sampler = TokenSampler(rng_for(seed, "mooncake.blocks"), vocab_size)
    blocks: dict[int, list[int]] = {}
    requests: list[Request] = []
    for arrival, prompt_len, output_len, ids in rows:
        length = min(prompt_len, cap)
        tokens: list[int] = []
        for h in ids[: -(-length // BLOCK_TOKENS)]:
            if h not in blocks:
                blocks[h] = sampler.tokens(BLOCK_TOKENS)
            tokens += blocks[h]
        if len(tokens) < length:
            tokens += sampler.tokens(length - len(tokens))
        requests.append(Request(len(requests), 0.0 if arrival is None else arrival - origin,
                                tuple(tokens[:length]), output_len))
    return requests
