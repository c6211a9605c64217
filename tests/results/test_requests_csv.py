"""requests.csv as pandas reads it back: the columns in order, ints as int64, times and
latencies as float64 (an empty cell where a value is missing: an unstarted sample, a
one-token sample's TPOT), `completed` as bool, every float to the bit, whatever values the
rows hold (whole floats, exponents, infinity)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest

from kvbench.results.request_table import REQUEST_COLUMNS, RequestTable


def _row(request_id: int, **values) -> dict:
    row = dict(request_id=request_id, sample=0, arrival_s=request_id / 3,
               sent_s=request_id / 3, client_wait_ms=0.0, prompt_len=17, output_len=5, n=1,
               admitted_s=1e-05, first_token_s=0.1 + 0.2, finish_s=1e16 / 7, queue_ms=0.0,
               prefill_ms=123.456, ttft_ms=2 / 3, tpot_ms=math.nan, e2e_ms=1e-300,
               preemptions=0, cached_prompt_tokens=16, output_tokens=1, completed=True,
               host_load_ms=0.0, prefill_compute_ms=123.456)
    row.update(values)
    return row


CASES = {
    "finished": [_row(i) for i in range(5)],
    "unstarted samples": [_row(0), _row(1, sample=1, n=2, admitted_s=math.nan,
                                        first_token_s=math.nan, finish_s=math.nan,
                                        queue_ms=math.nan, completed=False,
                                        output_tokens=0, host_load_ms=math.nan,
                                        prefill_compute_ms=math.nan)],
    "nothing sent": [_row(0, sent_s=math.nan, client_wait_ms=math.nan)],
    "whole floats": [_row(0, arrival_s=0.0, sent_s=0.0), _row(1, arrival_s=4.0, sent_s=4.0,
                                                              e2e_ms=-7.0, ttft_ms=1e16)],
    "inf": [_row(0, tpot_ms=math.inf, e2e_ms=-math.inf)],
}


def _table(rows: list[dict]) -> RequestTable:
    return RequestTable({name: np.array([row[name] for row in rows]) for name in REQUEST_COLUMNS})


@pytest.mark.parametrize("name", list(CASES))
def test_pandas_reads_back_the_rows(name):
    rows = CASES[name]
    out = io.BytesIO()
    _table(rows).write_csv(out)
    back = pd.read_csv(io.BytesIO(out.getvalue()))
    expected = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
    pd.testing.assert_frame_equal(back, expected, check_exact=True)


def test_an_empty_table_is_the_header():
    out = io.BytesIO()
    RequestTable.empty().write_csv(out)
    assert out.getvalue().decode() == ",".join(REQUEST_COLUMNS) + "\n"
