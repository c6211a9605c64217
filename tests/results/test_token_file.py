"""`write_token_file` gathers each sample's times from ranges of the step ends: the file must
hold, for each sample, its times (`Sequence.token_times_s`, read one float at a time), the
very doubles; the arrays it hands the report what reading the file gives; its ITLs,
expanded, every gap the per-token arrays give. Here the samples share one engine's `StepTimes`, with ranges of
engine steps and of decode cohort steps, several per sample, as the engine records them."""

from __future__ import annotations

import io
import math
from array import array

import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes
from kvbench.report import charts
from kvbench.report.charts import sorted_inter_token_gaps_s
from kvbench.results import token_file
from kvbench.results.metrics import latency_stats
from kvbench.results.token_times import TOKENS_FILE, pooled_gaps_s, read_token_arrays

ODD_ENDS = [0.0, 5e-5, 0.0078125, 7.0000005, 999_999_999.999999, 1e9 + 0.25, 2e9]


@st.composite
def _run(draw):
    """An engine's step ends and cohort steps, and requests whose samples' token steps are
    ranges of them."""
    steps = draw(st.integers(1, 40))
    increments = draw(st.lists(st.floats(1e-7, 5.0), min_size=steps, max_size=steps))
    ends = np.cumsum(increments)
    if draw(st.booleans()):  # tiny, huge, exact halves
        odd = draw(st.lists(st.sampled_from(ODD_ENDS), min_size=1, max_size=3))
        ends = np.sort(np.concatenate([ends, odd]))[: max(steps, len(odd))]
    log = StepTimes()
    log.ends = array("d", ends.tolist())
    cohort = sorted(draw(st.sets(st.integers(0, len(ends) - 1), max_size=len(ends))))
    log.cohort_steps = array("q", cohort)
    requests, sequences = [], {}
    for request_id in range(draw(st.integers(0, 8))):
        n = draw(st.integers(1, 3))
        request = Request(request_id, arrival_s=0.0, prompt_token_ids=(1,), output_len=4, n=n)
        requests.append(request)
        seqs = []
        for sample in draw(st.permutations(range(n))):
            seq = Sequence(request_id * 10 + sample, request, sample, [1])
            at = 0  # the next engine step a range may take: a sample's times only grow
            for _ in range(draw(st.integers(0, 3))):
                later = [j for j, step in enumerate(cohort) if step >= at]
                if later and draw(st.booleans()):
                    a = draw(st.sampled_from(later))
                    b = draw(st.integers(a + 1, len(cohort)))
                    seq.token_steps += [~a, ~b]
                    at = cohort[b - 1] + 1
                elif at < len(ends):
                    a = draw(st.integers(at, len(ends) - 1))
                    at = draw(st.integers(a + 1, len(ends)))
                    seq.token_steps += [a, at]
            seq.step_times = log
            seqs.append(seq)
        if draw(st.booleans()) or request_id % 3:  # (a request the engine never saw)
            sequences[request_id] = seqs
    return requests, sequences


def _expected(requests, sequences) -> list[tuple[int, int, list[float]]]:
    """(request id, sample, times) of each row, in request order, samples in order."""
    return [(r.request_id, s.sample_index, list(s.token_times_s))
            for r in requests for s in sorted(sequences.get(r.request_id, []),
                                              key=lambda s: s.sample_index)]


def _rows(read) -> list[tuple[int, int, list[float]]]:
    return list(zip(read.request_ids.tolist(), read.samples.tolist(),
                    [t.tolist() for t in read.sample_times()], strict=True))


@settings(max_examples=300, deadline=None)
@given(_run(), st.integers(1, 6))
def test_the_file_arrays_and_itls_are_the_per_token_ones(tmp_path_factory, run, chunk):
    requests, sequences = run
    buffer = io.BytesIO()
    saved = token_file._CHUNK_TOKENS
    token_file._CHUNK_TOKENS = chunk  # tokens gathered a few at a time
    try:
        written = token_file.write_token_file(buffer, requests, sequences)
        # What the report may read instead of every token (before `times_s` is gathered).
        counts, gaps = written.times.time_counts(), written.times.gaps_s()
        times_s = written.times.times_s
    finally:
        token_file._CHUNK_TOKENS = saved
    folder = tmp_path_factory.mktemp("tokens")
    (folder / TOKENS_FILE).write_bytes(buffer.getvalue())
    read = read_token_arrays(folder)
    assert _rows(read) == _expected(requests, sequences)
    for field in ("request_ids", "samples", "starts"):
        np.testing.assert_array_equal(getattr(written.times, field), getattr(read, field))
    # The compact forms: the same multisets of doubles as every token's.
    assert np.sort(counts.expand()).tobytes() == np.sort(read.times_s).tobytes()
    assert np.sort(gaps.expand()).tobytes() == \
        np.sort(pooled_gaps_s(read.times_s, read.starts)).tobytes()
    if read.times_s.size:
        edges = np.linspace(0.0, float(read.times_s.max()) or 1.0, 7)
        assert np.array_equal(np.histogram(counts.values, edges, weights=counts.counts)[0],
                              np.histogram(read.times_s, edges)[0])
    assert times_s.tobytes() == read.times_s.tobytes()
    # The report's ITL CDF of a run in memory is the one `kvbench report` draws from the file.
    x, y = charts._weighted_cdf(gaps)
    want_x, want_y = charts._sorted_cdf(sorted_inter_token_gaps_s(read))
    assert x.tobytes() == want_x.tobytes() and y.tobytes() == want_y.tobytes()
    assert np.sort(written.times.gaps_s().expand()).tobytes() == \
        np.sort(pooled_gaps_s(read.times_s, read.starts)).tobytes()  # from the array now
    # Every gap of the per-token arrays, as the same doubles; the summary's figures of them.
    expected = pooled_gaps_s(read.times_s, read.starts) * 1e3
    got = written.itl_ms.expand()
    assert np.sort(got).tobytes() == np.sort(expected).tobytes()
    stats, want = written.itl_ms.stats(), latency_stats(expected)
    assert {k: v for k, v in stats.items() if k != "mean"} == \
        {k: v for k, v in want.items() if k != "mean"}
    assert stats["mean"] == want["mean"] or math.isclose(stats["mean"], want["mean"],
                                                         rel_tol=1e-12)


def test_a_sample_with_one_token_and_one_without_have_no_gaps():
    log = StepTimes()
    for t in (0.5, 0.75, 1.0):
        log.add(t)
    request = Request(0, arrival_s=0.0, prompt_token_ids=(1,), output_len=1, n=2)
    one, none = Sequence(0, request, 0, [1]), Sequence(1, request, 1, [1])
    one.token_steps, one.step_times = [1, 2], log
    buffer = io.BytesIO()
    written = token_file.write_token_file(buffer, [request], {0: [none, one]})
    assert pq.read_table(io.BytesIO(buffer.getvalue())).to_pylist() == [
        {"request_id": 0, "sample": 0, "token_times_s": [0.75]},
        {"request_id": 0, "sample": 1, "token_times_s": []}]
    assert len(written.itl_ms) == 0 and written.itl_ms.stats()["p50"] is None
    assert written.times.times_s.tolist() == [0.75]
    assert pooled_gaps_s(written.times.times_s, written.times.starts).size == 0
