"""`request_columns` builds requests.csv's rows as columns: the values, the frame (dtypes
too) and the bytes must be those of the dict rows `request_records` gives, whatever the
samples hold (unstarted, one token, int times, NaN, samples out of order or missing)."""

from __future__ import annotations

import csv
import dataclasses
import io
import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence, TokenCount
from kvbench.results import request_table
from kvbench.results.metrics import REQUEST_COLUMNS, request_frame, request_records, requests_csv
from kvbench.results.request_table import (
    RequestTable,
    columns_frame,
    csv_writer_lines,
    request_columns,
    requests_csv_bytes,
)

_time = (st.none() | st.floats(0, 1e4) | st.integers(0, 10**6)
         | st.sampled_from([0.1 + 0.2, 1e-5, 1e16 / 7, 2.5, math.nan, math.inf]))


@st.composite
def _run(draw):
    requests, samples = [], {}
    for request_id in range(draw(st.integers(0, 6))):
        n = draw(st.integers(1, 3))
        arrival = draw(st.floats(0, 100) | st.integers(0, 100))
        request = Request(request_id, arrival_s=arrival, prompt_token_ids=(1, 2), output_len=4,
                          n=n)
        requests.append(request)
        if not draw(st.booleans()) and request_id % 2:
            continue  # never sent
        sent = request if draw(st.booleans()) else dataclasses.replace(
            request, arrival_s=draw(st.floats(100, 200) | st.integers(100, 200)))
        seqs = []
        for index in draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n)):
            seq = Sequence(request_id * 10 + index, sent, index,
                           TokenCount(2 + draw(st.integers(0, 4))))
            seq.admitted_s, seq.first_token_s, seq.finish_s = (draw(_time) for _ in range(3))
            seq.preemptions = draw(st.integers(0, 3))
            seq.cached_prompt_tokens = draw(st.integers(0, 2))
            seqs.append(seq)
        if seqs:
            samples[request_id] = seqs
    return requests, samples


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(_run(), st.integers(1, 4))
def test_columns_frame_and_bytes_are_the_dict_rows(run, chunk):
    requests, samples = run
    request_table._CHUNK_ROWS, saved = chunk, request_table._CHUNK_ROWS  # chunks of rows
    try:
        _check(requests, samples)
    finally:
        request_table._CHUNK_ROWS = saved


def _check(requests, samples) -> None:
    records = list(request_records(requests, samples))
    columns = request_columns(requests, samples)
    assert list(columns) == list(REQUEST_COLUMNS)
    for name, values in columns.items():
        expected = [row[name] for row in records]
        assert len(values) == len(expected)
        assert all(map(_same, values, expected)), (name, values, expected)
    pd.testing.assert_frame_equal(columns_frame(columns), request_frame(records),
                                  check_exact=True)
    assert requests_csv_bytes(columns) == requests_csv(records).encode()
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(row.values() for row in records)
    assert csv_writer_lines(columns) == out.getvalue().encode()
    # The table the runner builds: latencies kept as arrays until written.
    table = RequestTable.build(requests, samples)
    pd.testing.assert_frame_equal(table.frame(), request_frame(records), check_exact=True)
    written = io.BytesIO()
    table.write_csv(written)
    assert written.getvalue() == requests_csv(records).encode()
    assert table.csv_writer_lines() == out.getvalue().encode()
    # Compact (numpy columns), where the values allow: the same rows, frame and bytes; and
    # tables of parts, joined and put back in order, as the partial file's batches are.
    compact = table.compact()
    ints = all(type(row[c]) is int for row in records for c in ("request_id", "prompt_len"))
    floats = all(type(row[c]) in (float, type(None)) for row in records
                 for c in ("arrival_s", "sent_s", "admitted_s", "first_token_s", "finish_s"))
    assert (compact is not None) == (ints and floats)
    if compact is None:
        return
    _same_table(compact, records, out.getvalue())
    half = len(requests) // 2
    parts = [RequestTable.build(requests[half:], samples).compact(),
             RequestTable.build(requests[:half], samples).compact()]
    joined = RequestTable.concat(parts)
    order = [i for i in range(joined.num_rows)]
    first = parts[0].num_rows
    order = order[first:] + order[:first]  # the second part's rows come first
    _same_table(joined.take(np.array(order, dtype=np.int64)), records, out.getvalue())


def _same_table(table, records, csv_text) -> None:
    assert all(map(_same, [v for c in table.lists().values() for v in c],
                   [row[name] for name in REQUEST_COLUMNS for row in records]))
    pd.testing.assert_frame_equal(table.frame(), request_frame(records), check_exact=True)
    written = io.BytesIO()
    table.write_csv(written)
    assert written.getvalue() == requests_csv(records).encode()
    assert table.csv_writer_lines() == csv_text.encode()
