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
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    RowError,
    RowErrors,
    TraceRow,
    check_not_empty,
    count,
    json_lines,
    prompt_lengths,
    seconds,
    to_requests,
    warn_skipped,
)

BLOCK_TOKENS = 512  # tokens per hash id in the published Mooncake traces


def looks_like_mooncake(first: dict[str, Any]) -> bool:
    return "hash_ids" in first or ("input_length" in first and "output_length" in first)


def _parse(obj: Any) -> tuple[TraceRow, tuple[int, ...]]:
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
    return (
        TraceRow(
            arrival_s=None if arrival is None else seconds(arrival, "timestamp", 1e-3),
            prompt_len=count(obj["input_length"], "input_length"),
            output_len=count(obj["output_length"], "output_length"),
        ),
        tuple(hash_ids),
    )


def load_mooncake(
    path: Path, num_requests: int | None, seed: int, vocab_size: int,
    max_model_len: int | None = None,
) -> list[Request]:
    errors = RowErrors(path)
    rows: list[TraceRow] = []
    hashes: list[tuple[int, ...]] = []
    skipped = 0
    with_time: bool | None = None
    for lineno, obj in json_lines(path, errors):
        try:
            row, ids = _parse(obj)
            if with_time is None:
                with_time = row.arrival_s is not None
            elif with_time != (row.arrival_s is not None):
                raise RowError("timestamp on some lines only: give it on every line or none")
        except RowError as exc:
            errors.add(lineno, str(exc))
            continue
        if row.prompt_len == 0 or row.output_len == 0:
            skipped += 1
            continue
        rows.append(row)
        hashes.append(ids)
        if len(rows) == num_requests:
            break
    errors.raise_if_any()
    check_not_empty(path, len(rows))
    warn_skipped(path, skipped, len(rows), "input_length or output_length 0")

    sampler = TokenSampler(rng_for(seed, "mooncake.blocks"), vocab_size)
    blocks: dict[int, list[int]] = {}
    prompts: list[tuple[int, ...]] = []
    for ids, length in zip(hashes, prompt_lengths(path, rows, max_model_len), strict=True):
        num_blocks = -(-length // BLOCK_TOKENS)
        tokens: list[int] = []
        for h in ids[:num_blocks]:
            block = blocks.get(h)
            if block is None:
                block = blocks[h] = sampler.tokens(BLOCK_TOKENS)
            tokens += block
        if len(tokens) < length:
            tokens += sampler.tokens(length - len(tokens))
        prompts.append(tuple(tokens[:length]))
    return to_requests(rows, prompts)
