"""`requests.csv`'s rows as columns: built once per run from the sequences, for the frame the
summary and the report read, for the file, and (a batch of finished requests at a time) for
`.requests.csv.partial`.

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

import operator
from collections.abc import Sequence as Seq
from typing import Any

import numpy as np
import pandas as pd

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.csv_rows import csv_lines
from kvbench.results.metrics import REQUEST_COLUMNS, request_frame

# The columns that hold times: a sample that never started has None in them.
_TIMES = ("admitted_s", "first_token_s", "finish_s")
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


def request_columns(requests: Seq[Request],
                    samples: dict[int, list[Sequence]]) -> dict[str, list[Any]]:
    """`metrics.request_records(requests, samples)` as columns (`REQUEST_COLUMNS`, each a list
    of the values its rows hold, in row order)."""
    row_request, row_seq, sample, sent = _rows_of(requests, samples)
    if not row_request:
        return {name: [] for name in REQUEST_COLUMNS}
    request_id, arrival, prompt_ids, output_len, n_col = map(
        list, zip(*map(_OF_REQUEST, row_request), strict=True))
    prompt_len = list(map(len, prompt_ids))
    del prompt_ids
    admitted, first, finish, token_ids, seq_prompt_len, preemptions, cached = map(
        list, zip(*map(_OF_SAMPLE, row_seq), strict=True))
    generated = list(map(operator.sub, map(len, token_ids), seq_prompt_len))
    del token_ids, seq_prompt_len
    times = {name: _Times(values) for name, values in (
        ("arrival", arrival), ("sent", sent), ("admitted", admitted), ("first", first),
        ("finish", finish))}
    return {
        "request_id": request_id, "sample": sample, "arrival_s": arrival, "sent_s": sent,
        "client_wait_ms": _ms(times["arrival"], times["sent"]), "prompt_len": prompt_len,
        "output_len": output_len, "n": n_col, "admitted_s": admitted,
        "first_token_s": first, "finish_s": finish,
        "queue_ms": _ms(times["sent"], times["admitted"]),
        "prefill_ms": _ms(times["admitted"], times["first"]),
        "ttft_ms": _ms(times["sent"], times["first"]),
        "tpot_ms": _ms(times["first"], times["finish"], generated),
        "e2e_ms": _ms(times["sent"], times["finish"]),
        "preemptions": preemptions, "cached_prompt_tokens": cached,
        "output_tokens": generated, "completed": [t is not None for t in finish],
    }


class _Times:
    """A column of times, as given (None where missing) and as float64 (NaN there): each
    is converted once, for the latencies that read it."""

    __slots__ = ("values", "array")

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.array = np.array(values, dtype=np.float64)


def _ms(a: _Times, b: _Times, generated: list[int] | None = None) -> list[Any]:
    """`(b - a) * 1e3` of each pair (None where either is None), as `metrics._ms` computes
    it; given `generated`, `sample_rows`' TPOT: `(b - a) / (generated - 1) * 1e3`, None
    unless more than one token."""
    with np.errstate(invalid="ignore"):
        values = b.array - a.array
        if generated is not None:
            count = np.array(generated, dtype=np.int64) - 1
            values = values / np.where(count > 0, count, 1)
        values = values * 1e3
    out = values.tolist()
    # None where a time is (a NaN of the times themselves stays NaN), or a TPOT is not
    # defined: few, where they are not all (an interrupted run's unstarted samples).
    for i in np.flatnonzero(np.isnan(values)).tolist():
        if a.values[i] is None or b.values[i] is None:
            out[i] = None
    if generated is not None:
        for i in np.flatnonzero(count <= 0).tolist():
            out[i] = None
    return out


def columns_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """`metrics.request_frame` of the rows `columns` hold (the same dtypes: pandas infers
    each column's from its values either way; no rows: columns of objects, as there)."""
    if not columns["request_id"]:
        return request_frame([])
    return pd.DataFrame(columns, columns=list(REQUEST_COLUMNS))


def _rows(columns: dict[str, list[Any]]) -> list[tuple]:
    return list(zip(*(columns[c] for c in REQUEST_COLUMNS), strict=True))


def _lines(columns: dict[str, list[Any]]) -> bytes:
    """The rows through `csv_lines`, told their Nones and their `completed` bools."""
    return csv_lines(_rows(columns), _percent, sum(c.count(None) for c in columns.values()),
                     len(columns["completed"]))


def _percent(rows: list[tuple]) -> str:
    """What `csv.writer` writes for these rows (ints, floats as repr, bools; None empty)."""
    text = "".join(map(_LINE.__mod__, rows))
    return text.replace("None", "") if "None" in text else text


def csv_writer_lines(columns: dict[str, list[Any]]) -> bytes:
    """The rows as `csv.writer` writes them (`.requests.csv.partial`'s lines)."""
    return _lines(columns)


def requests_csv_bytes(columns: dict[str, list[Any]]) -> bytes:
    """`columns_frame(columns).to_csv(index=False)`, encoded: each value as `str` (a float's
    shortest repr, as pandas writes a float64; an int; True/False), a missing one empty.
    Rows pandas would write otherwise (a NaN: pandas writes an empty cell, str "nan"; an
    int time, which pandas writes as a float in a column of floats) go through pandas."""
    if not columns["request_id"] \
            or not _NONE_OR_FLOAT.issuperset(map(type, columns["arrival_s"])) \
            or not _NONE_OR_FLOAT.issuperset(map(type, columns["sent_s"])):
        return columns_frame(columns).to_csv(index=False).encode()
    body = _lines(columns)
    if b"nan" in body:
        return columns_frame(columns).to_csv(index=False).encode()
    return _HEADER + body


_NONE_OR_FLOAT = frozenset((float, _NONE))

__all__ = ["columns_frame", "csv_writer_lines", "request_columns", "request_frame",
           "requests_csv_bytes"]
