"""BurstGPT traces (HPMLL/BurstGPT): CSV of ChatGPT and GPT-4 requests served on Azure.

    Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
    5,ChatGPT,472,18,490,Conversation log

- `Timestamp`: arrival in seconds since the trace started; kept relative to the earliest row
  (t = 0), scaled by `time_scale`;
- `Request tokens`, `Response tokens`: prompt and output tokens;
- `Model`, `Total tokens`, `Log Type` and any newer columns (`Session ID`, `Elapsed time`)
  are read past.

**Failed requests.** `BurstGPT_1.csv` and `BurstGPT_2.csv` keep failed requests as rows with
`Response tokens` = 0. They are left out (with a `TraceRowsSkippedWarning` giving the count):
a request that produced no output has no decode to replay, and leaving it out makes the full
files replay like their published `BurstGPT_without_fails_*.csv` counterparts (the ones
vLLM's benchmarks use). Rows with 0 request tokens are left out the same way.

No prompt content or sharing: prompts are seeded random token ids. `num_requests` keeps the
first replayed rows (the rest of the file is not read).
"""

from __future__ import annotations

from pathlib import Path

from kvbench.core.request import Request
from kvbench.workloads.csv_trace import read_csv_rows
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    TraceRow,
    check_not_empty,
    count,
    prompt_lengths,
    seconds,
    to_requests,
    warn_skipped,
)

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def _parse(record: dict[str, str]) -> TraceRow | None:
    row = TraceRow(
        arrival_s=seconds(record["Timestamp"], "Timestamp"),
        prompt_len=count(record["Request tokens"], "Request tokens"),
        output_len=count(record["Response tokens"], "Response tokens"),
    )
    return row if row.prompt_len and row.output_len else None


def load_burstgpt(
    path: Path, num_requests: int | None, seed: int, vocab_size: int,
    max_model_len: int | None = None,
) -> list[Request]:
    rows, skipped = read_csv_rows(path, COLUMNS, _parse, num_requests)
    check_not_empty(path, len(rows))
    warn_skipped(path, skipped, len(rows), "failed requests: 0 response or request tokens")
    sampler = TokenSampler(rng_for(seed, "burstgpt.tokens"), vocab_size)
    return to_requests(rows, sampler.lazy_rows(
        prompt_lengths(path, rows, max_model_len, drawn_now=False)))
