"""The plain reader of CSV traces: numpy over chunks of whole lines (~0.2 µs a row, where the
csv module's row reader takes ~3 µs).

It reads files without quotes or irregular rows whose fields are in the simple forms that
published traces use (`csv_plain.py`, `csv_numbers.py`), and gives up (None) on anything
else: the row reader (`csv_trace.read_csv_rows`) then reads the file from its start. It only
answers when the row reader would give the same rows, the same count of rows left out and
no error: every line it reads is checked, and with `num_requests` it reads past the last
row kept at least as far as the row reader would (one more record, and the text layer's
read-ahead) before it stops, so it never answers where the row reader would fail.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.csv_numbers import parse_counts
from kvbench.workloads.csv_plain import line_chunks, plain_header, plain_lines
from kvbench.workloads.trace_table import TraceColumns

# How far past the record it last returned the csv module's reader may have decoded text
# (its text layer reads 8 KiB at a time), with room to spare.
READ_AHEAD_BYTES = 1 << 16


def read_plain_columns(path: Path, fmt: CsvFormat, num_requests: int | None
                       ) -> tuple[TraceColumns, int] | None:
    """The replayed rows (the first `num_requests`) and how many rows were left out, as the
    row reader gives them, or None when the file is not plain (then only the row reader can
    tell what it holds)."""
    if num_requests is not None and num_requests < 1:
        return None
    rows = _KeptRows(num_requests)
    try:
        with path.open("rb") as data:
            header = plain_header(data.readline(csv.field_size_limit() + 8))
            if header is None:
                return None
            index = {name: i for i, name in enumerate(header)}  # a repeated name: the last
            if any(name not in index for name in fmt.columns):
                return None
            wanted = [index[name] for name in fmt.columns]
            for text in line_chunks(data):
                lines = plain_lines(text, len(header), wanted)
                if lines is None:
                    return None
                (t0, t1), (p0, p1), (o0, o1) = lines.fields
                arrival = fmt.arrivals(text, lines.buf, t0, t1)
                prompt = parse_counts(lines.buf, p0, p1)
                output = parse_counts(lines.buf, o0, o1)
                if arrival is None or prompt is None or output is None:
                    return None
                if rows.add(len(text), lines.line_end, arrival, prompt, output):
                    break
    except OSError:
        return None  # the row reader says what is wrong
    return rows.columns(), rows.skipped


class _KeptRows:
    """The rows kept so far (up to `limit`), the count left out, and where reading stops."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.kept = self.skipped = 0
        self.full = False  # `limit` rows kept: later lines are only checked
        self.offset = 0  # bytes of lines taken (after the header)
        self.read_until: int | None = None  # where the row reader's reading would end

    def add(self, size: int, line_end: np.ndarray, arrival: np.ndarray, prompt: np.ndarray,
            output: np.ndarray) -> bool:
        """Take one chunk of `size` bytes (its non-empty lines end at `line_end`); True when
        the row reader would not have read past it."""
        after = line_end  # the ends of the lines after the last row kept
        if not self.full:
            keep = (prompt > 0) & (output > 0)
            kept_here = np.flatnonzero(keep)
            after = line_end[:0]
            if self.limit is not None and self.kept + len(kept_here) >= self.limit:
                stop = int(kept_here[self.limit - self.kept - 1]) + 1
                keep, arrival, prompt, output = keep[:stop], arrival[:stop], prompt[:stop], \
                    output[:stop]
                after = line_end[stop:]
                self.full = True
            num_kept = int(np.count_nonzero(keep))
            self.kept += num_kept
            self.skipped += len(keep) - num_kept
            self.parts.append((arrival[keep], prompt[keep], output[keep]))
        if self.full and self.read_until is None and len(after):
            # the row reader reads one more record, and decodes ahead of it
            self.read_until = self.offset + int(after[0]) + READ_AHEAD_BYTES
        self.offset += size
        return self.read_until is not None and self.offset >= self.read_until

    def columns(self) -> TraceColumns:
        if not self.parts:
            none = np.zeros(0, dtype=np.int64)
            return TraceColumns(none.astype(np.float64), none, none)
        arrival, prompt, output = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        return TraceColumns(arrival, prompt, output)


__all__ = ["READ_AHEAD_BYTES", "read_plain_columns"]
