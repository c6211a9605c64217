"""`requests.csv`'s rows as columns: built once per run from the sequences, for the frame the
summary and the report read, for the file, and (a batch of finished requests at a time) for
the working folder's `requests.csv`.

`metrics.sample_rows` builds a dict per sample and `pd.DataFrame` reads the dicts back
column by column: about 10 us a sample, a tenth of a second per 10,000 samples, and done
twice (once as each request finishes, for the partial file, and once at the end). Here each
column is a list gathered in one pass over the samples, the latencies are computed with
numpy over whole columns (the same float operations as `sample_rows`' Python floats, so the
same doubles), and the text goes through orjson (`csv_rows.csv_lines`). The values, the
frame (dtypes included) and the bytes are those of the dict rows:
`tests/results/test_request_table.py`.
"""

from __future__ import annotations

import io
import operator
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.columns import Columns
from kvbench.results.csv_rows import csv_lines
from kvbench.results.metrics import REQUEST_COLUMNS, request_frame

if TYPE_CHECKING:
    import pandas as pd

_LINE = ",".join(["%s"] * len(REQUEST_COLUMNS)) + "\n"
_HEADER = (",".join(REQUEST_COLUMNS) + "\n").encode()
_NONE = type(None)


class _Unstarted:
    """What `sample_rows` reads of a sample that never started."""

    admitted_s = first_token_s = finish_s = None
    token_ids = ()
    prompt_len = preemptions = cached_prompt_tokens = 0


_UNSTARTED = _Unstarted()
# `Request.prompt_len` and `Sequence.num_generated` are properties (a Python call each, and
# the second calls the first): read here as what they compute, `len(prompt_token_ids)` and
# `len(token_ids) - prompt_len` (a sequence's `prompt_len` is its request's, set once).
_OF_REQUEST = operator.attrgetter("request_id", "arrival_s", "prompt_token_ids", "output_len",
                                  "n")
_OF_SAMPLE = operator.attrgetter("admitted_s", "first_token_s", "finish_s", "token_ids",
                                 "prompt_len", "preemptions", "cached_prompt_tokens")


def _rows_of(requests: Seq[Request], samples: dict[int, list[Sequence]],
             ) -> tuple[list[Request], list[Any], list[int], list[Any]]:
    """Each row's request, sample (a sequence, or `_UNSTARTED`), sample index and send time.
    When every request has one sample, which ran (nearly always), without a Python frame per
    row: the maps below run in C."""
    seqs = list(map(samples.get, map(_REQUEST_ID, requests)))
    if (seqs and None not in seqs and set(map(_N, requests)) == {1}
            and set(map(len, seqs)) == {1}):
        first = list(map(_FIRST, seqs))
        if set(map(_SAMPLE_INDEX, first)) == {0}:
            return list(requests), first, [0] * len(first), list(map(_SENT, first))
    # One pass lists each row's request and sample.
    row_request: list[Request] = []
    row_seq: list[Any] = []
    sample: list[int] = []
    sent: list[Any] = []
    empty: list[Sequence] = []
    for request, ran in zip(requests, seqs, strict=True):
        ran = ran or empty
        if request.n == 1 and len(ran) == 1 and ran[0].sample_index == 0:
            row_request.append(request)
            row_seq.append(ran[0])
            sample.append(0)
            sent.append(ran[0].request.arrival_s)
            continue
        found = {s.sample_index: s for s in ran}
        sent_s = ran[0].request.arrival_s if ran else None
        for index in range(request.n):
            row_request.append(request)
            row_seq.append(found.get(index, _UNSTARTED))
            sample.append(index)
            sent.append(sent_s)
    return row_request, row_seq, sample, sent


_REQUEST_ID = operator.attrgetter("request_id")
_N = operator.attrgetter("n")
_FIRST = operator.itemgetter(0)
_SAMPLE_INDEX = operator.attrgetter("sample_index")
_SENT = operator.attrgetter("request.arrival_s")


class Floats:
    """A column of floats: float64 values (NaN where missing), and where `sample_rows` has
    None rather than a NaN (`none`; None when nowhere). The latencies, and the times of a
    compact table."""

    __slots__ = ("values", "none")

    def __init__(self, values: np.ndarray, none: np.ndarray | None) -> None:
        self.values = values
        self.none = none

    def tolist(self, start: int = 0, stop: int | None = None) -> list[Any]:
        """The values of rows `start:stop` as `sample_rows` gives them (floats, None)."""
        out = self.values[start:stop].tolist()
        if self.none is not None:
            for i in np.flatnonzero(self.none[start:stop]).tolist():
                out[i] = None
        return out

    @classmethod
    def of_values(cls, values: list[Any]) -> Floats:
        """Floats of a list of floats and Nones."""
        array = np.array(values, dtype=np.float64)
        none = None
        if np.isnan(array).any():
            none = np.fromiter(map(_is_none, values), dtype=bool, count=len(values))
            none = none if none.any() else None
        return cls(array, none)

    def take(self, order: np.ndarray) -> Floats:
        return Floats(self.values[order], None if self.none is None else self.none[order])

    @classmethod
    def concat(cls, parts: list[Floats]) -> Floats:
        nones = [p.none for p in parts]
        none = None
        if any(n is not None for n in nones):
            none = np.concatenate([np.zeros(p.values.size, dtype=bool) if n is None else n
                                   for p, n in zip(parts, nones, strict=True)])
        return cls(np.concatenate([p.values for p in parts]), none)

    def for_frame(self) -> np.ndarray | list[Any]:
        """What `pd.DataFrame` makes of the column from `sample_rows`' values: float64 (None
        as NaN), or, all None, objects."""
        if self.none is None:
            return self.values
        if self.none.all():
            return self.tolist()
        return np.where(self.none, np.nan, self.values)


# The latency columns: (name, times it subtracts, whether it divides by the tokens after
# the first, as TPOT does).
_LATENCIES = (("client_wait_ms", "arrival_s", "sent_s"), ("queue_ms", "sent_s", "admitted_s"),
              ("prefill_ms", "admitted_s", "first_token_s"),
              ("ttft_ms", "sent_s", "first_token_s"), ("tpot_ms", "first_token_s", "finish_s"),
              ("e2e_ms", "sent_s", "finish_s"))
_INT_COLUMNS = frozenset(("request_id", "sample", "prompt_len", "output_len", "n",
                          "preemptions", "cached_prompt_tokens", "output_tokens"))
# The columns that may hold a float (and so a NaN).
_FLOAT_COLUMNS = ("arrival_s", "sent_s", "admitted_s", "first_token_s", "finish_s",
                  *(name for name, _, _ in _LATENCIES))
# Rows formatted at once: about 1 MB of text, in buffers the allocator reuses (and a row
# that orjson writes otherwise sends only its chunk's rows the slow way).
_CHUNK_ROWS = 1 << 12


class RequestTable:
    """`metrics.request_records(requests, samples)` as columns (`REQUEST_COLUMNS`): lists of
    the values the rows read (the sequences' own objects), latencies as `Floats` (a million
    requests' six latencies would be six million Python floats)."""

    def __init__(self, columns: dict[str, list[Any] | Floats]) -> None:
        self.columns = columns
        self.num_rows = len(columns["request_id"])

    @classmethod
    def build(cls, requests: Seq[Request], samples: dict[int, list[Sequence]]) -> RequestTable:
        """The rows of `requests` (`samples` holds their sequences)."""
        row_request, row_seq, sample, sent = _rows_of(requests, samples)
        if not row_request:
            return cls({name: [] for name in REQUEST_COLUMNS})
        request_id, arrival, prompt_ids, output_len, n_col = map(
            list, zip(*map(_OF_REQUEST, row_request), strict=True))
        prompt_len = list(map(len, prompt_ids))
        del prompt_ids, row_request
        admitted, first, finish, token_ids, seq_prompt_len, preemptions, cached = map(
            list, zip(*map(_OF_SAMPLE, row_seq), strict=True))
        del row_seq
        generated = list(map(operator.sub, map(len, token_ids), seq_prompt_len))
        del token_ids, seq_prompt_len
        columns: dict[str, Any] = {
            "request_id": request_id, "sample": sample, "arrival_s": arrival, "sent_s": sent,
            "prompt_len": prompt_len, "output_len": output_len, "n": n_col,
            "admitted_s": admitted, "first_token_s": first, "finish_s": finish,
            "preemptions": preemptions, "cached_prompt_tokens": cached,
            "output_tokens": generated, "completed": [t is not None for t in finish],
        }
        times = {name: np.array(columns[name], dtype=np.float64)  # None: NaN
                 for name in ("arrival_s", "sent_s", "admitted_s", "first_token_s", "finish_s")}
        count = np.array(generated, dtype=np.int64) - 1
        for name, a, b in _LATENCIES:
            columns[name] = _latency(columns[a], times[a], columns[b], times[b],
                                     count if name == "tpot_ms" else None)
        return cls({name: columns[name] for name in REQUEST_COLUMNS})

    def lists(self) -> dict[str, list[Any]]:
        """Every column as the list of `sample_rows`' values."""
        return {name: _tolist(c, 0, self.num_rows) for name, c in self.columns.items()}

    def frame(self) -> pd.DataFrame:
        """`metrics.request_frame` of the rows (the same dtypes: pandas infers each column's
        from its values either way, and a compact column holds the dtype it infers; no rows:
        columns of objects, as there)."""
        import pandas as pd  # (a run's own summary and report read `columns_table`)

        if not self.num_rows:
            return request_frame([])
        return pd.DataFrame({name: c.for_frame() if isinstance(c, Floats) else c
                             for name, c in self.columns.items()}, columns=list(REQUEST_COLUMNS))

    def columns_table(self) -> Columns:
        """The rows as `Columns`, the values `frame()` holds without pandas: every float
        column (the times, the latencies) float64 with NaN where a value is missing, the
        others as numpy infers them (ints, bools)."""
        out: dict[str, np.ndarray] = {}
        for name, column in self.columns.items():
            if isinstance(column, Floats):
                out[name] = (column.values if column.none is None
                             else np.where(column.none, np.nan, column.values))
            elif name in _FLOAT_COLUMNS:
                out[name] = np.array(column, dtype=np.float64)  # (None is NaN)
            else:
                out[name] = np.asarray(column)
        return Columns(out)

    def rows(self, start: int, stop: int) -> list[tuple]:
        """Rows `start:stop` as tuples of `sample_rows`' values."""
        return list(zip(*(_tolist(c, start, stop) for c in self.columns.values()),
                        strict=True))

    def compact(self) -> RequestTable | None:
        """The table with every column in numpy (8 bytes a value, not a Python object),
        holding the very values: ints, bools, and floats or None; None when a column holds
        another type (an int time, an int beyond int64), which pandas would read otherwise."""
        out: dict[str, Any] = {}
        for name, column in self.columns.items():
            if not isinstance(column, list):
                out[name] = column
                continue
            kinds = set(map(type, column))
            try:
                if name in _INT_COLUMNS and kinds <= {int}:
                    out[name] = np.fromiter(column, dtype=np.int64, count=len(column))
                elif name in _FLOAT_COLUMNS and kinds <= _NONE_OR_FLOAT:
                    out[name] = Floats.of_values(column)
                elif name == "completed" and kinds <= {bool}:
                    out[name] = np.fromiter(column, dtype=bool, count=len(column))
                else:
                    return None
            except OverflowError:
                return None
        return RequestTable(out)

    @classmethod
    def concat(cls, tables: list[RequestTable]) -> RequestTable:
        """The rows of compact `tables`, one after another (compact too)."""
        tables = [t for t in tables if t.num_rows]
        if not tables:
            empty = cls({name: [] for name in REQUEST_COLUMNS}).compact()
            assert empty is not None  # (no value of another type)
            return empty
        if len(tables) == 1:
            return tables[0]
        return cls({name: (Floats.concat([t.columns[name] for t in tables])
                           if isinstance(tables[0].columns[name], Floats)
                           else np.concatenate([t.columns[name] for t in tables]))
                    for name in REQUEST_COLUMNS})

    def take(self, order: np.ndarray) -> RequestTable:
        """The compact table's rows `order`."""
        return RequestTable({name: c.take(order) if isinstance(c, Floats) else c[order]
                             for name, c in self.columns.items()})

    def csv_writer_lines(self) -> bytes:
        """The rows as `csv.writer` writes them (the streamed `requests.csv`'s lines)."""
        return b"".join(self._chunks())

    def write_csv(self, handle: IO[bytes]) -> None:
        """Write `requests.csv` to `handle`: `self.frame().to_csv(index=False)`, encoded, a
        chunk of rows at a time. Each value as `str` (a float's shortest repr, as pandas
        writes a float64; an int; True/False), a missing one empty. Rows pandas would write
        otherwise (a NaN: pandas writes an empty cell, str "nan"; an int time, which pandas
        writes as a float in a column of floats) send the table through pandas."""
        if not self.num_rows or self._pandas_writes_otherwise():
            handle.write(self.frame().to_csv(index=False).encode())
            return
        handle.write(_HEADER)
        for chunk in self._chunks():
            handle.write(chunk)

    def _pandas_writes_otherwise(self) -> bool:
        """Whether a time is not a float (an int: pandas may write `5.0`), or any value NaN."""
        columns = self.columns
        for name in ("arrival_s", "sent_s"):
            if isinstance(columns[name], list) \
                    and not _NONE_OR_FLOAT.issuperset(map(type, columns[name])):
                return True
        for name in _FLOAT_COLUMNS:
            column = columns[name]
            if isinstance(column, Floats):
                nan = np.isnan(column.values)
                if column.none is not None:
                    nan &= ~column.none
                if nan.any():
                    return True
            elif int(np.isnan(np.array(column, dtype=np.float64)).sum()) != column.count(None):
                return True
        return False

    def _chunks(self) -> Iterator[bytes]:
        """The rows' lines, `_CHUNK_ROWS` at a time, through `csv_lines`."""
        latencies = [c for c in self.columns.values() if isinstance(c, Floats)]
        for start in range(0, self.num_rows, _CHUNK_ROWS):
            stop = start + _CHUNK_ROWS
            # The latencies' Nones, from their masks: a count of some columns only, which
            # is all there are in the rows of finished samples (any other sends the chunk
            # the slow way); `completed` is a bool in every row.
            nones = sum(int(c.none[start:stop].sum()) for c in latencies if c.none is not None)
            yield csv_lines(self.rows(start, stop), _percent, nones, 1)


def _tolist(column: list[Any] | np.ndarray | Floats, start: int, stop: int) -> list[Any]:
    """Rows `start:stop` of a column as Python values."""
    if isinstance(column, list):
        return column[start:stop]
    if isinstance(column, Floats):
        return column.tolist(start, stop)
    return column[start:stop].tolist()


def _is_none(value: Any) -> bool:
    return value is None


def _latency(a: list[Any], a_s: np.ndarray, b: list[Any], b_s: np.ndarray,
             count: np.ndarray | None) -> Floats:
    """`(b - a) * 1e3` of each pair as `metrics._ms` computes it (the same float operations
    on the same doubles), None where either is None; given `count` (tokens after the first),
    `sample_rows`' TPOT: `(b - a) / count * 1e3`, None unless `count` is positive."""
    with np.errstate(invalid="ignore"):
        values = b_s - a_s
        if count is not None:
            values = values / np.where(count > 0, count, 1)
        values = values * 1e3
    none = None
    # None where a time is (a NaN of the times themselves stays NaN), or a TPOT is not
    # defined: few, where they are not all (an interrupted run's unstarted samples).
    for i in np.flatnonzero(np.isnan(values)).tolist():
        if a[i] is None or b[i] is None:
            if none is None:
                none = np.zeros(values.size, dtype=bool)
            none[i] = True
    if count is not None and (count <= 0).any():
        none = (count <= 0) if none is None else none | (count <= 0)
    return Floats(values, none)


def request_columns(requests: Seq[Request],
                    samples: dict[int, list[Sequence]]) -> dict[str, list[Any]]:
    """`metrics.request_records(requests, samples)` as columns (`REQUEST_COLUMNS`, each a list
    of the values its rows hold, in row order)."""
    return RequestTable.build(requests, samples).lists()


def _percent(rows: list[tuple]) -> str:
    """What `csv.writer` writes for these rows (ints, floats as repr, bools; None empty)."""
    text = "".join(map(_LINE.__mod__, rows))
    return text.replace("None", "") if "None" in text else text


def columns_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """`metrics.request_frame` of the rows `columns` hold."""
    return RequestTable(columns).frame()


def csv_writer_lines(columns: dict[str, list[Any]]) -> bytes:
    """The rows `columns` hold as `csv.writer` writes them."""
    return RequestTable(columns).csv_writer_lines()


def requests_csv_bytes(columns: dict[str, list[Any]]) -> bytes:
    """`columns_frame(columns).to_csv(index=False)`, encoded."""
    buffer = io.BytesIO()
    RequestTable(columns).write_csv(buffer)
    return buffer.getvalue()


_NONE_OR_FLOAT = frozenset((float, _NONE))

__all__ = ["Floats", "RequestTable", "columns_frame", "csv_writer_lines", "request_columns",
           "request_frame", "requests_csv_bytes"]
