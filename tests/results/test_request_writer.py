"""`RequestWriter` writes finished requests' rows to the working `requests.csv` in batches and
keeps them: `table` must give the rows `RequestTable.build` gives for every request, in
request order, whichever finished (in any order, some still held, in batches of any size)
and whichever did not."""

from __future__ import annotations

import io

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence, TokenCount
from kvbench.results.request_table import RequestTable
from kvbench.results.request_writer import RequestWriter
from kvbench.results.run_folder import read_partial_requests


@st.composite
def _run(draw):
    requests, samples, finished = [], {}, []
    for request_id in draw(st.permutations(range(draw(st.integers(0, 12))))):
        n = draw(st.integers(1, 3))
        request = Request(request_id, arrival_s=draw(st.floats(0, 100)),
                          prompt_token_ids=(1, 2), output_len=4, n=n)
        requests.append(request)
        state = draw(st.sampled_from(["finished", "running", "never sent"]))
        if state == "never sent":
            continue
        seqs = []
        for index in range(n if state == "finished" else draw(st.integers(0, n))):
            seq = Sequence(request_id * 10 + index, request, index,
                           TokenCount(2 + draw(st.integers(1, 4))))
            seq.admitted_s = draw(st.floats(100, 200))
            seq.first_token_s = seq.admitted_s + draw(st.floats(0, 1))
            seq.finish_s = (seq.first_token_s + draw(st.floats(0, 5)) if state == "finished"
                            else None)
            seqs.append(seq)
        samples[request_id] = seqs
        if state == "finished":
            finished.append(request)
    return requests, samples, draw(st.permutations(finished))


@settings(max_examples=200, deadline=None)
@given(_run(), st.integers(1, 5), st.booleans())
def test_the_table_is_every_row_built_again(tmp_path_factory, run, batch, by_time):
    requests, samples, finished = run
    folder = tmp_path_factory.mktemp("partial")
    writer = RequestWriter(folder, flush_every_s=0.0 if by_time else 3600.0, flush_rows=batch)
    for request in finished:  # as they finish, one at a time
        writer.write([request], samples)
    added = [r for r in requests if r.request_id in samples]
    table = writer.table(added, samples)
    expected = RequestTable.build(added, samples)
    pd.testing.assert_frame_equal(table.frame(), expected.frame(), check_exact=True)
    got, want = io.BytesIO(), io.BytesIO()
    table.write_csv(got)
    expected.write_csv(want)
    assert got.getvalue() == want.getvalue()
    # The streamed file holds the rows written, as requests.csv has them.
    kept = read_partial_requests(folder)
    assert len(kept) == writer.rows_written
    writer.close()
    assert not list(folder.glob(".*"))  # under its final name: no hidden file
