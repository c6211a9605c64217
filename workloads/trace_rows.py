"""Shared by the trace readers: bounded line reading, per-field validation, error collection.

Bad rows are collected and reported as one `KvbenchInputError` naming the first
(`file:line: what is wrong`) and counting the others, before anything is built; reading stops
at the `MAX_BAD_LINES`-th bad row (a file that is not a trace is not read to its end). A line
may hold at most `MAX_LINE_BYTES` (a prompt of a few million token ids), so a file without
line ends (`/dev/zero`) is refused after reading that much, not held whole.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import MAX_TRACE_TOKENS

MAX_LINE_BYTES = 64 << 20
MAX_BAD_LINES = 100
# What `--workload FILE` reads, for the message on a file that is none of them.
FORMATS_TEXT = ("kvbench or Mooncake JSON lines, a ShareGPT JSON list, or an Azure or "
                "BurstGPT CSV")


def not_a_trace(path: Path, why: str) -> KvbenchInputError:
    return KvbenchInputError(f"{path}: not a trace kvbench can read ({why}); expected "
                             f"{FORMATS_TEXT}")


class TraceRowsSkippedWarning(UserWarning):
    """Rows of a public trace were left out (failed requests, empty prompts or outputs)."""


class RowError(ValueError):
    """What is wrong with one row (the reader adds the file and line)."""


class RowErrors:
    """Collects `file:line` errors; `raise_if_any` reports the first and counts the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[str] = []

    def add(self, lineno: int, message: str) -> None:
        """Record a bad line; at the `MAX_BAD_LINES`-th, stop reading and report."""
        self.messages.append(f"{self.path}:{lineno}: {message}")
        if len(self.messages) >= MAX_BAD_LINES:
            self.raise_if_any(f"; reading stopped at line {lineno}")

    def raise_if_any(self, stopped: str = "") -> None:
        if self.messages:
            more = len(self.messages) - 1
            suffix = f" (and {more} more bad lines{stopped})" if more else ""
            raise KvbenchInputError(self.messages[0] + suffix)


def json_lines(path: Path, errors: RowErrors) -> Iterator[tuple[int, object]]:
    """Each non-blank line's JSON value with its line number; a line that is not UTF-8 JSON
    (or nests too deeply to parse) goes to `errors`; a line longer than `MAX_LINE_BYTES` is
    refused."""
    try:
        with path.open("rb") as data:
            for lineno, raw in enumerate(iter(lambda: data.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise not_a_trace(path, f"line {lineno} is longer than "
                                            f"{MAX_LINE_BYTES >> 20} MiB")
                if not raw.strip():
                    continue
                try:
                    yield lineno, json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    errors.add(lineno, "not UTF-8 text")
                except json.JSONDecodeError as exc:
                    errors.add(lineno, f"not valid JSON ({exc.msg} at column {exc.colno})")
                except RecursionError:
                    errors.add(lineno, "JSON nested too deeply")
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None


def read_rows(path: Path, parse: Callable[[Any], Any], num_requests: int | None,
              mixed_times: Callable[[bool], str], keep: Callable[[Any], bool] = bool,
              ) -> tuple[list[Any], int]:
    """The rows `parse` makes of a JSONL trace's lines (a row's first field its arrival time
    or None), up to the `num_requests`-th row kept, and how many were left out (`keep`
    false). A line whose arrival is given unlike the first line's is bad (`mixed_times`
    of whether the first line's was given says why)."""
    errors = RowErrors(path)
    rows: list[Any] = []
    skipped = 0
    timed: bool | None = None
    for lineno, obj in json_lines(path, errors):
        try:
            row = parse(obj)
            timed = row[0] is not None if timed is None else timed
            if timed != (row[0] is not None):
                raise RowError(mixed_times(timed))
        except RowError as exc:
            errors.add(lineno, str(exc))
            continue
        if not keep(row):
            skipped += 1
            continue
        rows.append(row)
        if len(rows) == num_requests:
            break
    errors.raise_if_any()
    return rows, skipped


def _number(value: Any, name: str, what: str, text_ok: bool) -> float | int:
    """A JSON number, or (`text_ok`) a number written as text (CSV fields)."""
    if isinstance(value, str) and text_ok:
        text = value.strip()
        if not text:
            raise RowError(f"{name} is empty")
        try:
            value = float(text)
        except ValueError:
            raise RowError(f"{name} must be {what}, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RowError(f"{name} must be {what}, got {value!r}")
    return value


def count(value: Any, name: str, minimum: int = 0, text_ok: bool = True) -> int:
    """A token count (or `n`) from a trace field: an integer >= `minimum`, integral floats
    and (`text_ok`) strings accepted, at most `MAX_TRACE_TOKENS`."""
    what = f"an integer >= {minimum}"
    value = _number(value, name, what, text_ok)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < minimum:
        raise RowError(f"{name} must be {what}, got {value!r}")
    if value > MAX_TRACE_TOKENS:
        why = "samples of one prompt" if name == "n" else "tokens, longer than any model's context"
        raise RowError(f"{name} {value:,} is more than {MAX_TRACE_TOKENS:,} {why}")
    return value


def seconds(value: Any, name: str, unit_s: float = 1.0, text_ok: bool = True) -> float:
    """A finite time >= 0 in the trace's unit, as seconds."""
    value = _number(value, name, "a number >= 0", text_ok)
    if not (math.isfinite(value) and value >= 0):
        raise RowError(f"{name} must be a finite number >= 0, got {value:g}")
    return float(value) * unit_s


def warn_skipped(path: Path, num_skipped: int, num_kept: int, why: str) -> None:
    if num_skipped:
        warnings.warn(f"{path}: {num_skipped} rows left out ({why}); {num_kept} replayed",
                      TraceRowsSkippedWarning, stacklevel=3)


def check_not_empty(path: Path, num_kept: int) -> None:
    if not num_kept:
        raise KvbenchInputError(f"{path}: the trace holds no requests to replay")
