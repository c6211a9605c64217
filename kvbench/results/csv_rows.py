"""CSV lines of rows of numbers through orjson, byte for byte what `%s`-formatting writes.

`steps.csv` and `requests.csv` are rows of ints, floats, None (an empty cell) and, in
`requests.csv`, bools: `"%s" % value` per cell (a float's repr, an int's digits), which is
what the csv module and pandas write for them. Python formats such a row in 3-6 us; orjson
serialises a list of rows in C, 0.2 us a row, and its text for an int, for a float in
[1e-4, 1e16) and for 0.0 is Python's own (both print the shortest repr). The rest it writes
otherwise, and each such case shows in its text, so a batch is checked on orjson's own
output instead of cell by cell:

- a float below 1e-4 (`0.0000999`, `1.5e-7` against `9.99e-05`, `1.5e-07`) or from 1e16
  (`1e+16`, the same today, but left out to stay within the range orjson documents as
  Python's): an `e`, or a value that starts `0.0000`;
- NaN and infinity, which orjson writes as `null`, like None: more `null`s than Nones;
- a string (quoted), a list, a type orjson refuses (a numpy scalar, an int beyond 64 bits):
  the whole batch goes the slow way.

True and False are `true` and `false`, turned into Python's words (`t` and `f` are in no
other word orjson writes for these cells); their `e`s are told from an exponent's by the
bools each row holds at least (the caller's count: requests.csv's `completed`). A batch that shows none of the above is orjson's text with
the brackets between rows turned into line ends, `null` deleted and the words capitalised;
otherwise its rows are checked one by one (orjson's text split at the row brackets) and
those that fail go through `fallback`, the caller's exact %-format. Calling orjson per row would cost as much as %-formatting (it sets up a buffer a
call), so a batch is serialised at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import orjson

_DUMPS = orjson.dumps


# The probes of the import-time checks (here, and of numpy's floats in `step_writer`): floats
# orjson writes as Python's repr, and floats it writes with an exponent or a `0.0000`.
REPR_FLOATS = (0.0, -0.0, 1e-4, -1e-4, 0.1 + 0.2, 1 / 3, 280.00003558163075,
               9.999999999999998e15, 123456789012345.67, 2.0**53, -1.5)
NOT_REPR_FLOATS = (9.99e-5, 1e-5, 1.5e-7, 5e-324, 1e16, 1.5e16, 1e21, 1e308)


def _writes_as_python() -> bool:
    """Whether this orjson writes what the checks above rely on: Python's repr in range, an
    exponent or a `0.0000` out of it, `null` for NaN (checked once, at import)."""
    inside = [*REPR_FLOATS, 2**63 - 1, -2**63]
    outside = list(NOT_REPR_FLOATS)
    try:
        ok = [_DUMPS(v) for v in inside] == [repr(v).encode() for v in inside]
        text = _DUMPS(outside)
        return ok and (text.count(b"e") + text.count(b"[0.0000") + text.count(b",0.0000")
                       == len(outside)) and _DUMPS([math.nan, math.inf]) == b"[null,null]"
    except TypeError:
        return False


_FAST = _writes_as_python()


def has_small_float(text: bytes) -> bool:
    """Whether a value in `text` (orjson's, no exponents) is below 1e-4 in magnitude: it
    starts `0.0000` after a comma, a bracket or a minus sign (one scan: in `100.00001` the
    same digits follow another digit)."""
    at = text.find(b"0.0000")
    while at >= 0:
        if at == 0 or text[at - 1] in _BEFORE_SMALL:
            return True
        at = text.find(b"0.0000", at + 6)
    return False


_BEFORE_SMALL = frozenset(b",[-")


def _count_none(row: Sequence) -> int:
    return row.count(None)


def csv_lines(rows: Sequence[Sequence], fallback: Callable[[list], str],
              nones: int | None = None, bools_per_row: int = 0) -> bytes:
    """`rows` as CSV lines (each ending in a newline), each cell as `"%s" % value` would
    write it and None as an empty cell: `fallback(rows)` gives that text for rows orjson
    would write otherwise. `nones`: how many cells are None, when the caller has counted
    them (a count of some columns only is safe: too few sends the batch the slow way);
    `bools_per_row`: how many cells of every row are known to hold True or False."""
    if not rows:
        return b""
    try:
        text = _DUMPS(rows) if _FAST else None
    except TypeError:  # (orjson.JSONEncodeError is one)
        text = None
    if text is None or b'"' in text or text.count(b"[") != len(rows) + 1:
        return fallback(list(rows)).encode("utf-8")
    if nones is None:
        nones = sum(map(_count_none, rows))
    bools = bools_per_row * len(rows)
    if _suspect(text, nones, bools):
        return _row_by_row(rows, text, fallback, bools_per_row)
    return _csv(text[2:-2].replace(b"],[", b"\n"), nones, bools) + b"\n"


def _suspect(text: bytes, nones: int, bools: int) -> bool:
    """Whether orjson's `text` (holding no strings or lists) of rows with `nones` None cells
    and at least `bools` bool cells may differ from Python's: an exponent, a small value, a
    NaN or infinity. (Each bool has one `e`; only `null` has an `n`.)"""
    e = text.count(b"e")
    if e != bools and e != text.count(b"true") + text.count(b"false"):
        return True
    return text.count(b"n") != nones or has_small_float(text)


_CAPITALS = bytes.maketrans(b"tf", b"TF")


def _csv(body: bytes, nones: int, bools: int) -> bytes:
    """orjson's text of cells (no brackets) as Python's: no `null`, capitalised bools."""
    if not bools and b"e" not in body:  # no bools: only `null` has an n, a u or an l
        return body.translate(None, b"nul") if nones else body
    if nones:  # (few: one scan and a join beat replace's count-then-copy)
        body = b"".join(body.split(b"null"))
    return body.translate(_CAPITALS)


def _row_by_row(rows: Sequence[Sequence], text: bytes, fallback: Callable[[list], str],
                bools_per_row: int) -> bytes:
    """`csv_lines` of rows whose orjson `text` (holding no strings or lists) showed a cell
    orjson may write otherwise: each row's part of it is checked alone, and the rows that
    fail go through `fallback`."""
    out: list[bytes] = []
    for row, line in zip(rows, text[2:-2].split(b"],["), strict=True):
        nones = row.count(None)
        if _suspect(b"[" + line, nones, bools_per_row):
            out.append(fallback([row]).encode("utf-8"))
        else:
            out.append(_csv(line, nones, bools_per_row) + b"\n")
    return b"".join(out)


__all__ = ["csv_lines"]
