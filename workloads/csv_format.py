"""`CsvFormat`: what a CSV trace format's reader needs to know (Azure, BurstGPT)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvbench.workloads.trace_rows import TraceRow, count


@dataclass(frozen=True)
class CsvFormat:
    """The columns giving arrival time, prompt and output tokens, and how to read an arrival
    time: from one field (`arrival`, raising `RowError`; the row reader) or from a whole
    column of plain fields (`arrivals(text, buf, start, end)`, None when any field is not in
    a simple form; the plain reader, `csv_plain_reader.py`)."""

    columns: tuple[str, str, str]
    arrival: Callable[[str], float]
    arrivals: Callable[[bytes, np.ndarray, np.ndarray, np.ndarray], np.ndarray | None]
    tokens_stream: str  # the seeded stream the prompts' ids are drawn from
    left_out: str  # why rows are left out, for the warning

    def parse(self, record: dict[str, str]) -> TraceRow | None:
        """One record's row, or None when it cannot be replayed (0 prompt or output
        tokens)."""
        time, prompt, output = self.columns
        row = TraceRow(
            arrival_s=self.arrival(record[time]),
            prompt_len=count(record[prompt], prompt),
            output_len=count(record[output], output),
        )
        return row if row.prompt_len and row.output_len else None


__all__ = ["CsvFormat"]
