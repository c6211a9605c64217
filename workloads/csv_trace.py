"""Reading a CSV trace into columns of its replayed rows, with Python's csv module:

- Azure LLM inference (Azure/AzurePublicDataset, 2023 and 2024): `TIMESTAMP` (an ISO
  date-time), `ContextTokens`, `GeneratedTokens`;
- BurstGPT (HPMLL/BurstGPT): `Timestamp` (seconds), `Request tokens`, `Response tokens`. Rows
  with 0 response tokens (failed requests, kept in `BurstGPT_1.csv` and `BurstGPT_2.csv`) are
  left out like rows with 0 prompt tokens, so the full files replay like their
  `BurstGPT_without_fails_*.csv` counterparts.

The header names the columns (stripped of spaces; a repeated name means its last column).
Each row's three fields are read as they come: the time (`float`, or an ISO date-time by
`datetime.fromisoformat`, UTC when it names no zone) and the two token counts (`float`, then
checked to be whole), into flat arrays. A row that is empty or holds nothing but spaces is
skipped. A row with another number of fields than the header, or a field that is not what
its column holds, is an input error naming the file and the first bad row's line
(`file:line: what is wrong`) and counting the other bad rows read. Reading stops at the row
that completes `num_requests`, or at the `MAX_BAD_LINES`-th bad row.

Replaying a trace costs far more than reading it, so the csv module's row-by-row reading is
enough; it names each bad row by its line and needs no library imported.
"""

from __future__ import annotations

import csv
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import MAX_TRACE_TOKENS
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import MAX_BAD_LINES, check_not_empty, warn_skipped
from kvbench.workloads.trace_table import TraceColumns, TraceTable, trace_table


@dataclass(frozen=True)
class CsvFormat:
    """The columns giving arrival time, prompt and output tokens; whether the time is an ISO
    date-time (Azure) or seconds (BurstGPT)."""

    columns: tuple[str, str, str]
    datetimes: bool
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
    header = csv_header(path)
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in fmt.columns if c not in index]
    if missing:
        raise KvbenchInputError(
            f"{path}:1: CSV header lacks {', '.join(missing)} (has {', '.join(header)})"
        )
    at_time, at_prompt, at_output = (index[name] for name in fmt.columns)
    parse_time = _posix_seconds if fmt.datetimes else float
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
                if len(fields) != len(header):
                    if any(field.strip() for field in fields):
                        problems.append((reader.line_num, f"expected {len(header)} columns, "
                                                          f"got {len(fields)}"))
                    continue
                try:
                    time = parse_time(fields[at_time])
                    prompt = float(fields[at_prompt])
                    output = float(fields[at_output])
                except ValueError:
                    if any(field.strip() for field in fields):
                        texts = (fields[at_time], fields[at_prompt], fields[at_output])
                        problems.append((reader.line_num, _unreadable(fmt, parse_time, texts)))
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
    _check_values(path, fmt, columns, np.frombuffer(lines, dtype=np.int64), problems)
    seconds, prompt_len, output_len = columns
    keep = (prompt_len > 0) & (output_len > 0)
    return TraceColumns(seconds[keep], prompt_len[keep].astype(np.int64),
                        output_len[keep].astype(np.int64)), len(keep) - int(keep.sum())


def _posix_seconds(text: str) -> float:
    """An ISO date-time as POSIX seconds (UTC when it names no zone)."""
    moment = datetime.fromisoformat(text.strip())
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _unreadable(fmt: CsvFormat, parse_time: Callable[[str], float],
                texts: tuple[str, str, str]) -> str:
    """What is wrong with a row whose fields could not all be read."""
    parsers = (parse_time, float, float)
    for k, (name, parse, text) in enumerate(zip(fmt.columns, parsers, texts, strict=True)):
        try:
            parse(text)
        except ValueError:
            if not text.strip():
                return f"{name} is empty"
            what = "a date-time" if k == 0 and fmt.datetimes else \
                "a number >= 0" if k == 0 else "an integer >= 0"
            return f"{name} must be {what}, got {text.strip()!r}"
    raise AssertionError("every field was read")


def _check_values(path: Path, fmt: CsvFormat, columns: tuple[np.ndarray, np.ndarray, np.ndarray],
                  lines: np.ndarray, problems: list[tuple[int, str]]) -> None:
    """Raise the first bad row's error (`problems`: those found while reading, in line
    order), counting the others: a time in seconds that is not a finite number >= 0, a token
    count that is not a whole number in [0, MAX_TRACE_TOKENS]."""
    seconds, prompts, outputs = columns
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(seconds) & ((seconds >= 0) | fmt.datetimes))
        for counts in (prompts, outputs):
            bad |= ~((counts >= 0) & (counts <= MAX_TRACE_TOKENS) & (counts == np.floor(counts)))
    more = int(np.count_nonzero(bad))
    if more:
        at = int(np.argmax(bad))
        problems = sorted([*problems, (int(lines[at]), _bad_value(fmt, seconds[at],
                                                                  prompts[at], outputs[at]))])
        more -= 1
    if problems:
        line, message = problems[0]
        more += len(problems) - 1
        suffix = f" (and {more} more bad lines)" if more else ""
        raise KvbenchInputError(f"{path}:{line}: {message}{suffix}")


def _bad_value(fmt: CsvFormat, seconds: float, prompt: float, output: float) -> str:
    """What is wrong with a row `_check_values` refuses (its first bad field)."""
    time_name, prompt_name, output_name = fmt.columns
    if not (math.isfinite(seconds) and (seconds >= 0 or fmt.datetimes)):
        return f"{time_name} must be a finite number >= 0, got {_text(seconds)}"
    name, value = (prompt_name, prompt) if not _whole_count(prompt) else (output_name, output)
    if value > MAX_TRACE_TOKENS:
        return (f"{name} {_text(value)} is more than {MAX_TRACE_TOKENS:,} tokens, longer than "
                "any model's context")
    return f"{name} must be an integer >= 0, got {_text(value)}"


def _whole_count(value: float) -> bool:
    return 0 <= value <= MAX_TRACE_TOKENS and value == math.floor(value)


def _text(value: float) -> str:
    value = float(value)
    return f"{int(value):,}" if math.isfinite(value) and value.is_integer() else repr(value)
