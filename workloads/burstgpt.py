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

from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.csv_trace import load_csv_table
from kvbench.workloads.trace_table import TraceTable

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
FORMAT = CsvFormat(COLUMNS, False, "burstgpt.tokens",
                   "failed requests: 0 response or request tokens")


def burstgpt_table(
    path: Path, num_requests: int | None, seed: int, vocab_size: int,
    max_model_len: int | None = None,
) -> TraceTable:
    """The trace's replayed rows, their requests not built yet (`trace_table.py`)."""
    return load_csv_table(path, FORMAT, num_requests, seed, vocab_size, max_model_len)
