"""Reading a CSV trace (Azure LLM inference, BurstGPT) into columns of its replayed rows.

Two readers give the same rows: the plain reader (`csv_plain_reader.py`: numpy, for files
in the simple form published traces have) and, for any other file, the row reader
(`read_csv_rows`: the csv module, a dict and Python checks per row), which also names the
first bad row (`file:line: ...`) of a file with bad rows.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.csv_plain_reader import read_plain_columns
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    RowError,
    RowErrors,
    TraceRow,
    check_not_empty,
    warn_skipped,
)
from kvbench.workloads.trace_table import TraceColumns, TraceTable, trace_table


def csv_header(path: Path) -> list[str]:
    """The first line's column names (stripped), or [] when it is not CSV text."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            return [c.strip() for c in next(csv.reader(text), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def load_csv_table(path: Path, fmt: CsvFormat, num_requests: int | None, seed: int,
                   vocab_size: int, max_model_len: int | None = None) -> TraceTable:
    """The trace's requests as a table (rows left out with a `TraceRowsSkippedWarning`);
    prompts are seeded random ids, drawn when first read."""
    columns, skipped = read_csv_columns(path, fmt, num_requests)
    check_not_empty(path, len(columns))
    warn_skipped(path, skipped, len(columns), fmt.left_out)
    sampler = TokenSampler(rng_for(seed, fmt.tokens_stream), vocab_size)
    return trace_table(path, columns, sampler, max_model_len)


def read_csv_columns(path: Path, fmt: CsvFormat, num_requests: int | None
                     ) -> tuple[TraceColumns, int]:
    """The replayed rows (the first `num_requests`, reading no further) and how many rows
    were left out; a bad row is a `KvbenchInputError` naming it."""
    plain = read_plain_columns(path, fmt, num_requests)
    if plain is not None:
        return plain
    rows, skipped = read_csv_rows(path, fmt.columns, fmt.parse, num_requests)
    return TraceColumns(
        np.array([row.arrival_s for row in rows], dtype=np.float64),
        np.array([row.prompt_len for row in rows], dtype=np.int64),
        np.array([row.output_len for row in rows], dtype=np.int64),
    ), skipped


def read_csv_rows(
    path: Path,
    columns: tuple[str, ...],
    parse: Callable[[dict[str, str]], TraceRow | None],
    num_requests: int | None,
) -> tuple[list[TraceRow], int]:
    """The rows `parse` keeps (None: skipped) and how many it skipped, read row by row.

    Reading stops once `num_requests` rows are kept, so the first requests of a multi-GB
    trace load without reading the rest.
    """
    errors = RowErrors(path)
    rows: list[TraceRow] = []
    skipped = 0
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            reader = csv.DictReader(text, skipinitialspace=True)
            header = [c.strip() for c in reader.fieldnames or []]
            missing = [c for c in columns if c not in header]
            if missing:
                raise KvbenchInputError(
                    f"{path}:1: CSV header lacks {', '.join(missing)} (has {', '.join(header)})"
                )
            reader.fieldnames = header
            for record in reader:
                if num_requests is not None and len(rows) >= num_requests:
                    break
                if _is_blank(record):
                    continue
                try:
                    if None in record or any(record.get(c) is None for c in columns):
                        raise RowError(f"expected {len(header)} columns")
                    row = parse(record)
                except RowError as exc:
                    errors.add(reader.line_num, str(exc))
                    continue
                if row is None:
                    skipped += 1
                else:
                    rows.append(row)
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise KvbenchInputError(f"{path}: not a readable CSV file ({exc})") from None
    errors.raise_if_any()
    return rows, skipped


def _is_blank(record: dict[str | None, str | list[str] | None]) -> bool:
    """A record with nothing but whitespace in every field (extra fields included: the csv
    module gives them as a list)."""
    for value in record.values():
        if isinstance(value, list):
            if any(v.strip() for v in value):
                return False
        elif value and value.strip():
            return False
    return True
