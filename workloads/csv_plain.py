"""Plain CSV: the byte ranges of a CSV file's fields found with numpy, for files that need
none of the csv module's finer rules.

The csv module costs ~3 µs a row (a dict and Python checks per row: seconds for a million-row
trace). Published traces are plain: one record per line, no quotes, the same number of
commas on every line. For such text, the fields are what splitting each line on commas
gives, which numpy finds for a whole chunk at once. A chunk is *plain* when:

- it holds no `"` (a quoted field may hold commas and newlines) and no NUL byte;
- it is UTF-8 (what the csv reader's text layer would refuse is never read past);
- a carriage return only ends a line (`\\r\\n`; a lone `\\r` is a line break to the csv module);
- no line is longer than `csv.field_size_limit()` (the csv module refuses such a field);
- every line is empty or has exactly the header's number of fields.

Anything else (`plain_lines` gives None) is left to the csv module, which reads it exactly
(`csv_trace.py`). Lines are split at `\\n`: an empty line (or a lone `\\r\\n`) is one the
csv module skips as well.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

BOM = b"\xef\xbb\xbf"
# Bytes read at a time: small enough that numpy's temporaries stay in cache (1 MiB was the
# fastest of 1, 4 and 16 MiB over a million-row trace), large enough that the per-chunk
# Python work is negligible.
CHUNK_BYTES = 1 << 20

NEWLINE, RETURN, COMMA, SPACE = 10, 13, 44, 32


@dataclass(frozen=True)
class PlainLines:
    """The non-empty lines of one chunk: for each wanted column, its fields' byte ranges
    (`start`, `end`, spaces around the field left out) in `text`."""

    text: bytes
    buf: np.ndarray  # `text` as uint8
    fields: list[tuple[np.ndarray, np.ndarray]]
    line_end: np.ndarray  # offset in `text` just past each non-empty line (its "\n" included)


def plain_header(line: bytes) -> list[str] | None:
    """The column names of a header line as the csv module gives them (stripped), or None
    when the line is not plain (then the csv module must read it)."""
    if line.startswith(BOM):
        line = line[len(BOM):]
    line = line.removesuffix(b"\n").removesuffix(b"\r")
    if b'"' in line or b"\0" in line or b"\r" in line or b"\n" in line:
        return None
    if len(line) > csv.field_size_limit():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    names = [name.strip() for name in text.split(",")]
    return names if any(names) else None


def line_chunks(data: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The rest of `data` in chunks of whole lines (the last may lack its newline)."""
    rest = b""
    while True:
        block = data.read(chunk_bytes)
        if not block:
            if rest:
                yield rest
            return
        text = rest + block
        cut = text.rfind(b"\n") + 1
        if cut:
            rest = text[cut:]
            yield text[:cut]
        elif len(text) > csv.field_size_limit():
            yield text  # a line too long to be plain: its reader stops here
            return
        else:  # no line ends in this block: keep reading
            rest = text


def plain_lines(text: bytes, num_columns: int, wanted: Sequence[int]) -> PlainLines | None:
    """The wanted columns' fields of every non-empty line of `text` (whole lines), or None
    when `text` is not plain CSV of `num_columns` columns (module docstring)."""
    if b'"' in text or b"\0" in text:
        return None
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return None
    buf = np.frombuffer(text, dtype=np.uint8)
    newlines = np.flatnonzero(buf == NEWLINE)
    line_end = newlines + 1
    if not text.endswith(b"\n"):
        line_end = np.append(line_end, len(text))
    start = np.empty_like(line_end)
    start[0] = 0
    start[1:] = line_end[:-1]
    end = newlines if len(newlines) == len(line_end) else np.append(newlines, len(text))
    if b"\r" in text:
        ends_cr = (end > start) & (buf[np.maximum(end - 1, 0)] == RETURN)
        if np.count_nonzero(buf == RETURN) != np.count_nonzero(ends_cr):
            return None  # a carriage return inside a line
        end = end - ends_cr
    if int((end - start).max()) > csv.field_size_limit():
        return None
    full = end > start
    if not full.all():
        start, end, line_end = start[full], end[full], line_end[full]
    commas = np.flatnonzero(buf == COMMA)
    per_line = num_columns - 1
    if per_line < 1 or len(commas) != per_line * len(start):
        return None
    # Commas are in file order: when each line's group of `per_line` commas lies inside that
    # line, every line has exactly `per_line` (the totals agree).
    at = commas.reshape(-1, per_line)
    if len(start) and not ((at[:, 0] >= start).all() and (at[:, -1] < end).all()):
        return None
    found = []
    for column in wanted:
        first = start if column == 0 else at[:, column - 1] + 1
        last = end if column == per_line else at[:, column]
        found.append(_trim_spaces(buf, first, last))
    return PlainLines(text, buf, found, line_end)


def _trim_spaces(buf: np.ndarray, start: np.ndarray, end: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """`start` and `end` moved past spaces at either end of each field (the csv module skips
    leading spaces, the field readers strip both ends)."""
    top = len(buf) - 1
    while True:
        lead = (start < end) & (buf[np.minimum(start, top)] == SPACE)
        if not lead.any():
            break
        start = start + lead
    while True:
        trail = (start < end) & (buf[np.maximum(end - 1, 0)] == SPACE)
        if not trail.any():
            break
        end = end - trail
    return start, end


__all__ = ["BOM", "CHUNK_BYTES", "PlainLines", "line_chunks", "plain_header", "plain_lines"]
