"""Reading a CSV trace row by row into `TraceRow`s (Azure LLM inference, BurstGPT)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from kvbench.errors import KvbenchInputError
from kvbench.workloads.trace_rows import RowError, RowErrors, TraceRow


def csv_header(path: Path) -> list[str]:
    """The first line's column names (stripped), or [] when it is not CSV text."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            return [c.strip() for c in next(csv.reader(text), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def read_csv_rows(
    path: Path,
    columns: tuple[str, ...],
    parse: Callable[[dict[str, str]], TraceRow | None],
    num_requests: int | None,
) -> tuple[list[TraceRow], int]:
    """The rows `parse` keeps (None: skipped) and how many it skipped.

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
