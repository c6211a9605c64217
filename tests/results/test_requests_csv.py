"""requests.csv is %-formatted from the rows instead of by pandas: it must be the bytes
`to_csv` writes for the same rows, whatever they hold (unfinished samples, exponents, ints
where times are, NaN)."""

from __future__ import annotations

import math

import pytest

from kvbench.results.metrics import REQUEST_COLUMNS, request_frame, requests_csv


def _record(request_id: int, **values) -> dict:
    row = {c: None for c in REQUEST_COLUMNS}
    row.update(request_id=request_id, sample=0, arrival_s=request_id / 3, sent_s=request_id / 3,
               client_wait_ms=0.0, prompt_len=17, output_len=5, n=1, admitted_s=1e-05,
               first_token_s=0.1 + 0.2, finish_s=1e16 / 7, queue_ms=0.0, prefill_ms=123.456,
               ttft_ms=2 / 3, tpot_ms=None, e2e_ms=1e-300, preemptions=0,
               cached_prompt_tokens=16, output_tokens=1, completed=True)
    row.update(values)
    return row


CASES = {
    "finished": [_record(i) for i in range(5)],
    "unstarted samples": [_record(0), _record(1, sample=1, n=2, admitted_s=None,
                                              first_token_s=None, finish_s=None,
                                              queue_ms=None, completed=False,
                                              output_tokens=0)],
    "nothing sent": [_record(0, sent_s=None, client_wait_ms=None)],
    "int arrival": [_record(0, arrival_s=0, sent_s=0), _record(1)],
    "all int arrivals": [_record(0, arrival_s=0, sent_s=0), _record(1, arrival_s=4, sent_s=4)],
    "nan": [_record(0, tpot_ms=math.nan), _record(1)],
    "inf": [_record(0, tpot_ms=math.inf)],
    "empty": [],
}


@pytest.mark.parametrize("name", list(CASES))
def test_text_is_what_pandas_writes(name):
    records = CASES[name]
    assert requests_csv(records) == request_frame(records).to_csv(index=False)
