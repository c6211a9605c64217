"""`RequestTable.build` builds requests.csv's rows from the run's sequences: each value must be
the one results/README.md defines (vLLM's latency definitions, per sample), whatever the
samples hold (unstarted, one token, int times, NaN, samples out of order or missing), and
the file must read back with pandas as those values, in those dtypes."""

from __future__ import annotations

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
from kvbench.results.request_table import REQUEST_COLUMNS, RequestTable

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
            if seq.admitted_s is not None and draw(st.booleans()):  # waited for a host load
                seq.kv_loaded_s = draw(_time)
            seq.preemptions = draw(st.integers(0, 3))
            seq.cached_prompt_tokens = draw(st.integers(0, 2))
            seqs.append(seq)
        if seqs:
            samples[request_id] = seqs
    return requests, samples


def _ms(a, b):
    return (b - a) * 1e3 if a is not None and b is not None else None


def _expected_rows(requests, samples) -> list[dict]:
    """One row per sample, as results/README.md defines its columns (None: missing)."""
    rows = []
    for request in requests:
        seqs = samples.get(request.request_id, [])
        by_index = {s.sample_index: s for s in seqs}
        sent = seqs[0].request.arrival_s if seqs else None
        for index in range(request.n):
            seq = by_index.get(index)
            admitted, first, finish, loaded = (
                (seq.admitted_s, seq.first_token_s, seq.finish_s, seq.kv_loaded_s)
                if seq else (None, None, None, None))
            admitted_known = admitted is not None and not math.isnan(admitted)
            if loaded is not None and math.isnan(loaded):  # (NaN: a missing time)
                loaded = None
            generated = seq.num_generated if seq else 0
            rows.append({
                "request_id": request.request_id, "sample": index,
                "arrival_s": request.arrival_s, "sent_s": sent,
                "client_wait_ms": _ms(request.arrival_s, sent),
                "prompt_len": request.prompt_len, "output_len": request.output_len,
                "n": request.n, "admitted_s": admitted, "first_token_s": first,
                "finish_s": finish, "queue_ms": _ms(sent, admitted),
                "prefill_ms": _ms(admitted, first), "ttft_ms": _ms(sent, first),
                "tpot_ms": ((finish - first) / (generated - 1) * 1e3
                            if finish is not None and first is not None and generated > 1
                            else None),
                "e2e_ms": _ms(sent, finish),
                "preemptions": seq.preemptions if seq else 0,
                "cached_prompt_tokens": seq.cached_prompt_tokens if seq else 0,
                "output_tokens": generated, "completed": finish is not None,
                # TTFT = queue + host_load + prefill_compute: no load, none of the prefill
                "host_load_ms": (_ms(admitted, loaded) if loaded is not None
                                 else 0.0 if admitted_known else None),
                "prefill_compute_ms": _ms(admitted if loaded is None else loaded, first),
            })
    return rows


def _same(ours, expected) -> bool:
    if expected is None or (isinstance(expected, float) and math.isnan(expected)):
        return isinstance(ours, float) and math.isnan(ours)
    return ours == expected and (isinstance(expected, bool) == isinstance(ours, bool))


def _check_values(frame: pd.DataFrame, rows: list[dict]) -> None:
    assert list(frame.columns) == list(REQUEST_COLUMNS)
    assert len(frame) == len(rows)
    for name in REQUEST_COLUMNS:
        values = frame[name].tolist()
        expected = [row[name] for row in rows]
        assert all(map(_same, values, expected)), (name, values, expected)
    if rows:
        ints = ("request_id", "sample", "prompt_len", "output_len", "n", "preemptions",
                "cached_prompt_tokens", "output_tokens")
        assert all(frame[name].dtype == np.int64 for name in ints)
        assert frame["completed"].dtype == bool
        assert all(frame[name].dtype == np.float64 for name in REQUEST_COLUMNS
                   if name.endswith(("_s", "_ms")))


@settings(max_examples=400, deadline=None)
@given(_run(), st.integers(1, 4))
def test_rows_are_the_definitions_and_read_back_as_written(run, chunk):
    requests, samples = run
    rows = _expected_rows(requests, samples)
    table = RequestTable.build(requests, samples)
    _check_values(table.frame(), rows)
    request_table._CHUNK_ROWS, saved = chunk, request_table._CHUNK_ROWS  # chunks of rows
    try:
        written = io.BytesIO()
        table.write_csv(written)
    finally:
        request_table._CHUNK_ROWS = saved
    back = pd.read_csv(io.BytesIO(written.getvalue()))
    _check_values(back, rows)
    # Tables of parts, joined and put back in order, as the partial file's batches are.
    half = len(requests) // 2
    parts = [RequestTable.build(requests[half:], samples),
             RequestTable.build(requests[:half], samples)]
    joined = RequestTable.concat(parts)
    first = parts[0].num_rows
    order = np.r_[np.arange(first, joined.num_rows), np.arange(first)]
    _check_values(joined.take(order).frame(), rows)
