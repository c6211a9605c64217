"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024): CSV of token counts.

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,374,44

- `TIMESTAMP`: wall-clock arrival as an ISO date-time (any number of fractional digits; a
  time zone such as `+00:00` is allowed, none means UTC); arrival times are taken relative to
  the earliest row (which arrives at t = 0) and scaled by `time_scale`;
- `ContextTokens`, `GeneratedTokens`: prompt and output tokens.

The trace has no prompt content and no sharing: prompts are seeded random token ids. Rows with
0 context or 0 generated tokens cannot be replayed and are left out with a
`TraceRowsSkippedWarning`. `num_requests` keeps the first rows (the rest of the file is not
read).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kvbench.core.request import Request
from kvbench.workloads.csv_trace import read_csv_rows
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    RowError,
    TraceRow,
    check_not_empty,
    count,
    prompt_lengths,
    to_requests,
    warn_skipped,
)

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _timestamp_s(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise RowError(f"TIMESTAMP must be a date-time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _parse(record: dict[str, str]) -> TraceRow | None:
    row = TraceRow(
        arrival_s=_timestamp_s(record["TIMESTAMP"]),
        prompt_len=count(record["ContextTokens"], "ContextTokens"),
        output_len=count(record["GeneratedTokens"], "GeneratedTokens"),
    )
    return row if row.prompt_len and row.output_len else None


def load_azure(path: Path, num_requests: int | None, seed: int, vocab_size: int,
               max_model_len: int | None = None) -> list[Request]:
    rows, skipped = read_csv_rows(path, COLUMNS, _parse, num_requests)
    check_not_empty(path, len(rows))
    warn_skipped(path, skipped, len(rows), "ContextTokens or GeneratedTokens 0")
    sampler = TokenSampler(rng_for(seed, "azure.tokens"), vocab_size)
    return to_requests(rows, sampler.lazy_rows(
        prompt_lengths(path, rows, max_model_len, drawn_now=False)))
