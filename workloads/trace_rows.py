"""Shared by the trace readers: bounded line reading, per-row validation, error collection,
request building.

A reader turns each row into a `TraceRow` (or skips it, or records what is wrong with it).
Bad rows are collected and reported as one `KvbenchInputError` naming the first
(`file:line: what is wrong`) and counting the others, before anything is built; reading stops
at the `MAX_BAD_LINES`-th bad row (a file that is not a trace is not read to its end).

A line may hold at most `MAX_LINE_BYTES` (a prompt of a few million token ids), so a file
without line ends (`/dev/zero`) is refused after reading that much, not held whole.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import MAX_TRACE_TOKENS, check_workload_fits, prompt_cap

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


@dataclass(frozen=True)
class TraceRow:
    arrival_s: float | None  # seconds on the trace's own clock (shifted to 0 later)
    prompt_len: int
    output_len: int


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
            lineno = 0
            while raw := data.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                if len(raw) > MAX_LINE_BYTES:
                    raise not_a_trace(path, f"line {lineno} is longer than "
                                            f"{MAX_LINE_BYTES >> 20} MiB")
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    errors.add(lineno, "not UTF-8 text")
                except json.JSONDecodeError as exc:
                    errors.add(lineno, f"not valid JSON ({exc.msg} at column {exc.colno})")
                except RecursionError:
                    errors.add(lineno, "JSON nested too deeply")
                else:
                    yield lineno, value
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None


def count(value: Any, name: str) -> int:
    """A token count from a trace field: an integer >= 0 (integral floats and strings ok)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text) if text else None
        except ValueError:
            raise RowError(f"{name} must be an integer >= 0, got {text!r}") from None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(f"{name} must be an integer >= 0, got {value!r}")
    if value > MAX_TRACE_TOKENS:
        raise RowError(f"{name} {value:,} is more than {MAX_TRACE_TOKENS:,} tokens, longer "
                       "than any model's context")
    return value


def seconds(value: Any, name: str, unit_s: float = 1.0) -> float:
    """A finite time >= 0 in the trace's unit, as seconds."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RowError(f"{name} must be a number >= 0, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RowError(f"{name} must be a number >= 0, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise RowError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value) * unit_s


def warn_skipped(path: Path, num_skipped: int, num_kept: int, why: str) -> None:
    if num_skipped:
        warnings.warn(
            f"{path}: {num_skipped} rows left out ({why}); {num_kept} replayed",
            TraceRowsSkippedWarning,
            stacklevel=3,
        )


def check_not_empty(path: Path, num_kept: int) -> None:
    if not num_kept:
        raise KvbenchInputError(f"{path}: the trace holds no requests to replay")


def prompt_lengths(path: Path, rows: list[TraceRow], max_model_len: int | None,
                   drawn_now: bool = True) -> list[int]:
    """How many tokens of each row's prompt to build (clipping keeps only the first
    `max_model_len`), checked to fit in memory before one is built. `drawn_now=False`: the
    prompts are drawn only if something reads them (`TokenSampler.lazy_rows`, whose draw
    checks its tokens then), so only the requests are checked here."""
    cap = prompt_cap(max_model_len)
    lengths = [min(row.prompt_len, cap) for row in rows]
    check_workload_fits(len(rows), sum(lengths) if drawn_now else 0, str(path))
    return lengths


def to_requests(
    rows: list[TraceRow], prompts: SequenceABC[SequenceABC[int]]
) -> list[Request]:
    """Requests in row order; arrivals shifted so the earliest row arrives at t = 0."""
    times = [r.arrival_s for r in rows if r.arrival_s is not None]
    origin = min(times) if times else 0.0
    return [
        Request(
            request_id=i,
            arrival_s=0.0 if row.arrival_s is None else row.arrival_s - origin,
            prompt_token_ids=prompt,
            output_len=row.output_len,
        )
        for i, (row, prompt) in enumerate(zip(rows, prompts, strict=True))
    ]
