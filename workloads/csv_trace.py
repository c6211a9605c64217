"""Reading a CSV trace (Azure LLM inference, BurstGPT) into columns of its replayed rows, with
pyarrow's streaming CSV reader (imported when a CSV trace is read, not with the package).

The header names the columns (stripped of spaces; a repeated name means its last column).
Only the three columns read are converted: the time (a number of seconds, or an ISO
date-time read by `datetime.fromisoformat`) and the two token counts. A line that is empty or
holds nothing but spaces and commas is skipped. A row with another number of fields than
the header, or a field that is not what its column holds, is an input error naming the file
and the first bad row's line (`file:line: what is wrong`; lines count records, as the CSV
reader numbers them) and how many more bad rows were read. With `num_requests` the file is
read a block at a time and reading stops with the block that holds the last row kept.
"""

from __future__ import annotations

import csv
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import MAX_TRACE_TOKENS
from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import check_not_empty, warn_skipped
from kvbench.workloads.trace_table import TraceColumns, TraceTable, trace_table

# pyarrow's message for a field its column's type cannot hold (read without threads, it
# names the row); another message is passed on as it is.
_CONVERSION = re.compile(r"In CSV column #(\d+): Row #(\d+): CSV conversion error to .*?: "
                         r"invalid value '(.*)'$", re.DOTALL)


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
    """The replayed rows (the first `num_requests`) and how many rows were left out (0
    prompt or output tokens); a bad row is a `KvbenchInputError` naming it."""
    # (heavy: imported when a CSV trace is read, not by every workload's import)
    import pyarrow as pa
    from pyarrow import csv as pacsv

    header = csv_header(path)
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in fmt.columns if c not in index]
    if missing:
        raise KvbenchInputError(
            f"{path}:1: CSV header lacks {', '.join(missing)} (has {', '.join(header)})"
        )
    wanted = [str(index[name]) for name in fmt.columns]
    types = (pa.string() if fmt.datetimes else pa.float64(), pa.float64(), pa.float64())
    problems = _Problems(path)
    kept = _Kept(num_requests)
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=False, skip_rows=1,
                                           column_names=[str(i) for i in range(len(header))]),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False,
                                             invalid_row_handler=problems.bad_row),
            convert_options=pacsv.ConvertOptions(
                include_columns=wanted, column_types=dict(zip(wanted, types, strict=True)),
                null_values=[""], strings_can_be_null=True),
        )
        for batch in reader:
            _take(batch, fmt, kept, problems)
            if kept.full:
                break
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except pa.ArrowInvalid as exc:
        problems.conversion(str(exc), header, fmt.columns[0])
    finally:
        # the reader's blocks, freed, go back to the system: a replay's memory peaks later
        pa.default_memory_pool().release_unused()
    problems.raise_if_any()
    return kept.columns(), kept.skipped


def _take(batch: Any, fmt: CsvFormat, kept: _Kept, problems: _Problems) -> None:
    """Check one batch of rows (up to the last one `kept` needs) and keep its replayed rows."""
    time, prompt, output = (batch.column(i) for i in range(3))
    given = [c.is_valid().to_numpy(zero_copy_only=False) for c in (time, prompt, output)]
    blank = ~(given[0] | given[1] | given[2])
    seconds = _seconds(time, fmt.datetimes)
    prompts = prompt.to_numpy(zero_copy_only=False)
    outputs = output.to_numpy(zero_copy_only=False)
    first_row = kept.rows_read
    kept.rows_read += len(blank)
    replayed = (prompts > 0) & (outputs > 0)
    cut = kept.cut(replayed)
    bad = ~blank[:cut] & ~(
        given[0][:cut] & np.isfinite(seconds[:cut]) & (seconds[:cut] >= 0)
        & _counts_ok(prompts[:cut], given[1][:cut]) & _counts_ok(outputs[:cut], given[2][:cut])
    )
    if bad.any():
        at = int(np.argmax(bad))
        time_name, prompt_name, output_name = fmt.columns
        message = (_time_problem(time_name, time[at].as_py(), seconds[at], fmt.datetimes)
                   or _count_problem(prompt_name, prompts[at], given[1][at])
                   or _count_problem(output_name, outputs[at], given[2][at]))
        problems.add(problems.line(first_row + at), str(message),
                     int(np.count_nonzero(bad)))
        return
    keep = replayed[:cut]
    kept.add(seconds[:cut][keep], prompts[:cut][keep], outputs[:cut][keep],
             int(np.count_nonzero(~blank[:cut] & ~keep)))


def _seconds(time: Any, datetimes: bool) -> np.ndarray:
    """The time column as seconds (NaN where empty or, for date-times, not one)."""
    if not datetimes:
        return time.to_numpy(zero_copy_only=False)
    texts = time.to_pylist()
    return np.fromiter(map(_posix_seconds, texts), np.float64, len(texts))


def _posix_seconds(text: str | None) -> float:
    """An ISO date-time as POSIX seconds (UTC when it names no zone); NaN when not one."""
    try:
        moment = datetime.fromisoformat(text.strip())  # type: ignore[union-attr]
    except (ValueError, AttributeError):
        return math.nan
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _counts_ok(values: np.ndarray, given: np.ndarray) -> np.ndarray:
    """Whether each token count is a whole number in [0, MAX_TRACE_TOKENS]."""
    with np.errstate(invalid="ignore"):
        return given & (values >= 0) & (values <= MAX_TRACE_TOKENS) & (values == np.floor(values))


def _time_problem(name: str, given: Any, seconds: float, datetimes: bool) -> str | None:
    """What is wrong with a time field (`given` as read, `seconds` as converted), or None."""
    if given is None:
        return f"{name} is empty"
    if datetimes:
        return None if math.isfinite(seconds) else f"{name} must be a date-time, got {given!r}"
    if math.isfinite(seconds) and seconds >= 0:
        return None
    return f"{name} must be a finite number >= 0, got {_text(seconds)}"


def _count_problem(name: str, value: float, given: bool) -> str | None:
    """What is wrong with a token count, or None."""
    if not given:
        return f"{name} is empty"
    if value > MAX_TRACE_TOKENS:
        return (f"{name} {_text(value)} is more than {MAX_TRACE_TOKENS:,} tokens, longer "
                "than any model's context")
    if not (value >= 0 and value == math.floor(value)):
        return f"{name} must be an integer >= 0, got {_text(value)}"
    return None


def _text(value: float) -> str:
    value = float(value)
    return f"{int(value):,}" if math.isfinite(value) and value.is_integer() else repr(value)


class _Kept:
    """The rows kept so far (up to `limit`), the count left out, and whether that is all."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.kept = self.skipped = self.rows_read = 0
        self.full = False

    def cut(self, replayed: np.ndarray) -> int:
        """How many of a batch's rows to read: all, or up to the one that reaches `limit`."""
        if self.limit is None:
            return len(replayed)
        at = np.flatnonzero(replayed)
        need = self.limit - self.kept
        if len(at) < need:
            return len(replayed)
        self.full = True
        return int(at[need - 1]) + 1

    def add(self, seconds: np.ndarray, prompts: np.ndarray, outputs: np.ndarray,
            skipped: int) -> None:
        self.parts.append((seconds, prompts.astype(np.int64), outputs.astype(np.int64)))
        self.kept += len(seconds)
        self.skipped += skipped

    def columns(self) -> TraceColumns:
        if not self.parts:
            none = np.zeros(0, dtype=np.int64)
            return TraceColumns(none.astype(np.float64), none, none)
        seconds, prompts, outputs = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        return TraceColumns(seconds.astype(np.float64), prompts, outputs)


class _Problems:
    """The first bad row (`file:line: ...`) and how many were found; the lines pyarrow's
    reader left out of its rows (so that a row's line can be told)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.first: tuple[int, str] | None = None
        self.count = 0
        self.left_out: list[int] = []

    def bad_row(self, row: Any) -> str:
        """pyarrow's `invalid_row_handler`: a row of another number of fields than the
        header is left out, and is a bad row unless it is blank."""
        self.left_out.append(row.number)
        if row.text.strip(" ,\t\r\n"):
            self.add(row.number, f"expected {row.expected_columns} columns, got "
                                 f"{row.actual_columns}")
        return "skip"

    def line(self, row: int) -> int:
        """The line of the reader's `row`-th row (from 0; the header is line 1)."""
        line = row + 2
        for left_out in self.left_out:  # in file order
            if left_out > line:
                break
            line += 1
        return line

    def add(self, line: int, message: str, count: int = 1) -> None:
        if self.first is None or line < self.first[0]:
            self.first = (line, message)
        self.count += count

    def conversion(self, message: str, header: list[str], time_name: str) -> None:
        """A field pyarrow could not read as a number: named by its line and column when
        pyarrow says which, else pyarrow's message as it is."""
        found = _CONVERSION.search(message)
        if found is None:
            raise KvbenchInputError(f"{self.path}: not a readable CSV trace ({message})")
        name = header[int(found[1])]
        what = "a number >= 0" if name == time_name else "an integer >= 0"
        self.add(int(found[2]), f"{name} must be {what}, got {found[3].strip()!r}")

    def raise_if_any(self) -> None:
        if self.first is not None:
            more = self.count - 1
            suffix = f" (and {more} more bad lines)" if more > 0 else ""
            raise KvbenchInputError(f"{self.path}:{self.first[0]}: {self.first[1]}{suffix}")


__all__ = ["csv_header", "load_csv_table", "read_csv_columns"]
