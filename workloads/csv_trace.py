"""Reading a CSV trace into a `TraceTable` of its replayed rows, with Python's csv module.

Azure LLM inference (`TIMESTAMP` an ISO date-time, `ContextTokens`, `GeneratedTokens`) and
BurstGPT (`Timestamp` in seconds, `Request tokens`, `Response tokens`); how the header, blank
and bad rows are read: docs/workloads.md, Public trace formats. Rows with 0 prompt or output
tokens (BurstGPT's failed requests) are left out, so the full BurstGPT files replay like their
`BurstGPT_without_fails_*.csv` counterparts. Reading stops at the row that completes
`num_requests`, or at the `MAX_BAD_LINES`-th bad row.
"""

from __future__ import annotations

import csv
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import MAX_TRACE_TOKENS, check_workload_fits, prompt_cap
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import (
    MAX_BAD_LINES,
    RowError,
    check_not_empty,
    count,
    seconds,
    warn_skipped,
)
from kvbench.workloads.trace_table import TraceTable


@dataclass(frozen=True)
class CsvFormat:
    columns: tuple[str, str, str]  # arrival time, prompt tokens, output tokens
    datetimes: bool  # the time is an ISO date-time (Azure), else seconds (BurstGPT)
    tokens_stream: str  # the seeded stream the prompts' ids are drawn from
    left_out: str  # why rows are left out, for the warning


AZURE = CsvFormat(("TIMESTAMP", "ContextTokens", "GeneratedTokens"), True, "azure.tokens",
                  "ContextTokens or GeneratedTokens 0")
BURSTGPT = CsvFormat(("Timestamp", "Request tokens", "Response tokens"), False,
                     "burstgpt.tokens", "failed requests: 0 response or request tokens")


def csv_header(path: Path) -> list[str]:
    """The first line's column names (stripped), or [] when it is not CSV text."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            return [c.strip() for c in next(csv.reader(text), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def load_csv_table(path: Path, fmt: CsvFormat, num_requests: int | None, seed: int,
                   vocab_size: int, max_model_len: int | None = None) -> TraceTable:
    """The trace's requests as a table (rows left out with a `TraceRowsSkippedWarning`):
    arrivals relative to the earliest row, prompts capped to the model's length and drawn
    from a seeded stream when first read."""
    (times, prompt_len, output_len), skipped = read_csv_columns(path, fmt, num_requests)
    check_not_empty(path, len(prompt_len))
    warn_skipped(path, skipped, len(prompt_len), fmt.left_out)
    check_workload_fits(len(prompt_len), 0, str(path))  # the prompts are checked when drawn
    lengths = np.minimum(prompt_len, prompt_cap(max_model_len))
    sampler = TokenSampler(rng_for(seed, fmt.tokens_stream), vocab_size)
    return TraceTable(times - times.min(), lengths, output_len, sampler.lazy_source(lengths))


def read_csv_columns(path: Path, fmt: CsvFormat, num_requests: int | None
                     ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
    """The replayed rows (the first `num_requests`) as columns of seconds (float64), prompt
    and output tokens (int64), and how many rows were left out (0 prompt or output tokens);
    a bad row is a `KvbenchInputError` naming it."""
    header = csv_header(path)
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in fmt.columns if c not in index]
    if missing:
        raise KvbenchInputError(
            f"{path}:1: CSV header lacks {', '.join(missing)} (has {', '.join(header)})"
        )
    at = [index[name] for name in fmt.columns]
    time_name = fmt.columns[0]
    parse_time = (lambda text: _datetime(text, time_name)) if fmt.datetimes else float
    times, prompts, outputs, lines = array("d"), array("d"), array("d"), array("q")
    problems: list[tuple[int, str]] = []
    kept = 0
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            reader = csv.reader(text, skipinitialspace=True)
            next(reader, None)  # the header
            for fields in reader:
                if len(problems) >= MAX_BAD_LINES:
                    break  # not a trace of this format: no need to read it all
                try:
                    if len(fields) != len(header):
                        raise IndexError
                    time = parse_time(fields[at[0]])
                    prompt = float(fields[at[1]])
                    output = float(fields[at[2]])
                except (IndexError, ValueError):
                    if any(field.strip() for field in fields):  # else a blank row
                        problems.append((reader.line_num, _problem(fmt, fields, at, header)))
                    continue
                times.append(time)
                prompts.append(prompt)
                outputs.append(output)
                lines.append(reader.line_num)
                if prompt > 0 and output > 0:
                    kept += 1
                    if kept == num_requests:
                        break
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise KvbenchInputError(f"{path}: not a readable CSV file ({exc})") from None
    columns = (np.frombuffer(times), np.frombuffer(prompts), np.frombuffer(outputs))
    with np.errstate(invalid="ignore"):  # NaN compares false: a bad row
        good = np.isfinite(columns[0]) & ((columns[0] >= 0) | fmt.datetimes)
        for tokens in columns[1:]:
            good &= (tokens >= 0) & (tokens <= MAX_TRACE_TOKENS) & (tokens == np.floor(tokens))
    bad = np.flatnonzero(~good)
    more = len(problems) + len(bad) - 1
    if len(bad):  # the first row of bad values, named as a bad field would be
        values = [float(column[bad[0]]) for column in columns]
        problems.append((int(lines[bad[0]]), _problem(fmt, values, [0, 1, 2], fmt.columns)))
    if problems:
        first = min(problems)
        suffix = f" (and {more} more bad lines)" if more else ""
        raise KvbenchInputError(f"{path}:{first[0]}: {first[1]}{suffix}")
    seconds_, prompt_len, output_len = columns
    keep = (prompt_len > 0) & (output_len > 0)
    return ((seconds_[keep], prompt_len[keep].astype(np.int64),
             output_len[keep].astype(np.int64)), len(keep) - int(keep.sum()))


def _datetime(value: str | float, name: str) -> float:
    """An ISO date-time as POSIX seconds (UTC when it names no zone)."""
    if not isinstance(value, str):
        return value  # read already
    if not value.strip():
        raise RowError(f"{name} is empty")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise RowError(f"{name} must be a date-time, got {value.strip()!r}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _problem(fmt: CsvFormat, fields: list, at: list[int], header: list[str]) -> str:
    """What is wrong with a row (its `fields` as text, or as read): its number of fields, or
    the first of its time, prompt and output fields (at `at`) that is bad."""
    if len(fields) != len(header):
        return f"expected {len(header)} columns, got {len(fields)}"
    for check, name, value in zip((_datetime if fmt.datetimes else seconds, count, count),
                                  fmt.columns, [fields[i] for i in at], strict=True):
        try:
            check(value, name)
        except RowError as exc:
            return str(exc)
    raise AssertionError("no field is bad")
