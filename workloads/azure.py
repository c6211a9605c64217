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

from pathlib import Path

from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.csv_trace import load_csv_table
from kvbench.workloads.trace_table import TraceTable

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
FORMAT = CsvFormat(COLUMNS, True, "azure.tokens", "ContextTokens or GeneratedTokens 0")


def azure_table(path: Path, num_requests: int | None, seed: int, vocab_size: int,
                max_model_len: int | None = None) -> TraceTable:
    """The trace's replayed rows, their requests not built yet (`trace_table.py`)."""
    return load_csv_table(path, FORMAT, num_requests, seed, vocab_size, max_model_len)
