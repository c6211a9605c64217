"""`tokens.jsonl` is written and read with numpy over whole arrays: the text must be
byte for byte what `json.dumps` writes for `round(t, 6)`, and reading it back must give the
floats `json` gives."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.results.token_times import (
    TOKENS_FILE,
    pooled_gaps_s,
    read_token_arrays,
    read_token_times,
    token_time_lines,
    token_times_file,
    value_text,
)

TRICKY = [
    0.1 + 0.2, 1e-7, 4.9e-7, 5e-7, 1.5e-6, 2.5e-6, 9.99e-5, 9.9995e-5, 1e-4, 0.000123,
    0.0078125,  # an exact half at the 7th decimal: rounds to even
    0.0234375, 1.0000005, 2.0000005, 0.1234565, 12.0, 1000.0, 999.9999995, 1000.001, 100.1,
    10.01, 0.0, -0.0, -1.5, 3600.000001, 86_399.999999, 123_456_789.123456, 999_999_999.999999,
    1e9, 1e15, 1e16, 1e300, 5e-324, math.nan, math.inf, -math.inf,
]


def microsecond_lists(series: list[list[float]]) -> list[str]:
    """`value_text` sliced per list: each list of seconds as `json.dumps([round(t, 6) for t in times])` writes it, without
    the brackets (`"0.1,0.300001"`): slices of `value_text` of them all."""
    lengths = [len(times) for times in series]
    if not sum(lengths):
        return ["" for _ in series]
    text, pos, _ = value_text(np.concatenate([np.asarray(t, dtype=float) for t in series]))
    ends = np.cumsum(lengths).tolist()
    return [text[pos[end - n] : pos[end] - 1].decode("ascii") if n else ""
            for n, end in zip(lengths, ends, strict=True)]


def _reference(times: list[float]) -> str:
    """The reference: one Python float at a time through `json.dumps`."""
    return json.dumps([round(float(t), 6) for t in times], separators=(",", ":"))[1:-1]


def test_tricky_values_print_as_json_dumps_of_round():
    # Half-microsecond steps: each value sits within an ulp of a rounding boundary, where
    # numpy's round (x * 1e6, rint, / 1e6) and Python's exact round can disagree.
    halves = (np.arange(1, 5000) / 2e6 + 7.0).tolist()
    series = [TRICKY, [], [0.5], TRICKY[:3], halves]
    assert microsecond_lists(series) == [_reference(s) for s in series]


def test_batches_of_lines_print_as_one(monkeypatch):
    rng = np.random.default_rng(0)
    series = [sorted(rng.uniform(0, 900, int(n)).tolist()) for n in rng.integers(0, 300, 80)]
    series[7] = [1e-5, 2.0]  # a line the array path leaves to json, inside a batch
    monkeypatch.setattr("kvbench.results.token_times._CHUNK_VALUES", 500)
    assert microsecond_lists(series) == [_reference(s) for s in series]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1e4)
                         | st.floats(0, 1e-3), max_size=30), max_size=5))
def test_any_float_prints_as_json_dumps_of_round(series):
    assert microsecond_lists(series) == [_reference(s) for s in series]


def _sequence(request: Request, sample: int, times: list[float]) -> Sequence:
    seq = Sequence(request.request_id * 10 + sample, request, sample,
                   list(request.prompt_token_ids))
    seq.add_token_times(times)
    return seq


def test_lines_are_the_documented_json_and_read_back(tmp_path):
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3, n=2)
                for i in range(3)]
    times = {0: [[0.1 + 0.2, 1.25], [0.5]], 1: [[], [1e-5, 2.0000005]], 2: [[7.0], [8.0]]}
    sequences = {i: [_sequence(requests[i], s, t) for s, t in reversed(list(enumerate(ts)))]
                 for i, ts in times.items()}
    lines = token_time_lines(requests, sequences)
    assert lines == [
        json.dumps({"request_id": i, "sample": s, "token_times_s": [round(t, 6) for t in ts]},
                   separators=(",", ":"))
        for i, samples in times.items() for s, ts in enumerate(samples)
    ]
    (tmp_path / TOKENS_FILE).write_text("".join(f"{line}\n" for line in lines))
    read = read_token_times(tmp_path)
    assert read == {i: [[round(t, 6) for t in ts] for ts in samples]
                    for i, samples in times.items()}
    arrays = read_token_arrays(tmp_path)
    assert arrays.request_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert arrays.samples.tolist() == [0, 1, 0, 1, 0, 1]


def test_reading_gives_the_floats_json_gives(tmp_path):
    rng = np.random.default_rng(1)
    series = [np.round(np.sort(rng.uniform(0, 3000, int(n))), 6).tolist()
              for n in rng.integers(0, 200, 50)]
    lines = [json.dumps({"request_id": i, "sample": 0, "token_times_s": s},
                        separators=(",", ":")) for i, s in enumerate(series)]
    # Written by another tool: spaces, other key order, exponents, no sample.
    lines.append('{"token_times_s": [1e-05, 2.5E+1, 3], "request_id": 99}')
    (tmp_path / TOKENS_FILE).write_text("\n".join(lines) + "\n\n")
    arrays = read_token_arrays(tmp_path)
    expected = [float(t) for line in lines for t in json.loads(line)["token_times_s"]]
    assert arrays.times_s.tolist() == expected  # exact, not approximately
    assert [a.tolist() for a in arrays.sample_times()] == [*series, [1e-05, 25.0, 3.0]]


@pytest.mark.parametrize("bad", ['{"request_id":1,"sample":0,"token_times_s":[0.1,,0.2]}',
                                 '{"request_id":1,"sample":0,"token_times_s":[01.5]}',
                                 '{"request_id":1,"sample":0}', "not json"])
def test_a_damaged_line_is_named(tmp_path, bad):
    good = '{"request_id":0,"sample":0,"token_times_s":[0.1,0.2]}'
    (tmp_path / TOKENS_FILE).write_text(f"{good}\n{bad}\n{good}\n")
    with pytest.raises(KvbenchInputError, match="line 2"):
        read_token_arrays(tmp_path)


def test_pooled_gaps_leave_out_the_gap_between_samples():
    samples = [[1.0, 1.5, 2.5], [], [7.0], [3.0, 3.25]]
    starts = np.cumsum([0, *map(len, samples)])
    gaps = pooled_gaps_s(np.concatenate([np.asarray(s) for s in samples]), starts)
    assert gaps.tolist() == [0.5, 1.0, 0.25]


def test_the_arrays_handed_to_the_report_are_what_the_file_reads_back(tmp_path):
    """A session passes its report the token times from memory instead of parsing the file it
    has just written: they must be exactly what reading the file gives."""
    finite = [t for t in TRICKY if math.isfinite(t) and t >= 0]
    halves = (np.arange(1, 3000) / 2e6 + 7.0).tolist()
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3, n=2)
                for i in range(4)]
    times = {0: [finite, [0.5]], 1: [[], halves], 2: [[1e-5, 2.0000005], []], 3: [[7.0], [8.0]]}
    sequences = {i: [_sequence(requests[i], s, t) for s, t in reversed(list(enumerate(ts)))]
                 for i, ts in times.items()}
    lines, kept = token_times_file(requests, sequences)
    assert lines == token_time_lines(requests, sequences)
    (tmp_path / TOKENS_FILE).write_text("".join(f"{line}\n" for line in lines))
    read = read_token_arrays(tmp_path)
    for field in ("request_ids", "samples", "starts", "times_s"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(read, field))
    assert kept.times_s.tobytes() == read.times_s.tobytes()  # the same doubles, bit for bit


def test_streamed_file_is_the_lines_and_hands_back_the_same_arrays(tmp_path, monkeypatch):
    """`write_token_file` writes the file through a buffer (here of 50 bytes: slices land
    on both sides of its edges) and formats values in chunks (here of 5): the file must be
    `token_time_lines` and the arrays those `token_times_file` gives."""
    from kvbench.results import token_file
    from kvbench.results.files import atomic_direct_file

    rng = np.random.default_rng(2)
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3)
                for i in range(40)]
    sequences = {i: [_sequence(requests[i], 0, np.cumsum(rng.random(int(rng.integers(0, 9))))
                               .tolist())] for i in range(0, 40, 1) if i != 7}
    lines, kept = token_times_file(requests, sequences)
    monkeypatch.setattr("kvbench.results.direct_file.BUFFER_BYTES", 50)
    monkeypatch.setattr("kvbench.results.token_times._CHUNK_VALUES", 5)
    with atomic_direct_file(tmp_path / TOKENS_FILE) as handle:  # as the runner writes it
        streamed = token_file.write_token_file(handle, requests, sequences)
    assert (tmp_path / TOKENS_FILE).read_text() == "".join(f"{line}\n" for line in lines)
    assert [json.loads(line)["request_id"] for line in lines] == [i for i in range(40) if i != 7]
    for field in ("request_ids", "samples", "starts", "times_s"):
        np.testing.assert_array_equal(getattr(streamed.times, field), getattr(kept, field))


def test_written_itls_are_the_engines(tmp_path):
    """The summary takes its ITLs from the pass that writes tokens.jsonl, as gaps with
    counts: expanded, they must be the very doubles `inter_token_latencies_ms` gives."""
    from kvbench.results.metrics import inter_token_latencies_ms
    from kvbench.results.token_file import write_token_file

    rng = np.random.default_rng(5)
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3, n=2)
                for i in range(30)]
    sequences = {i: [_sequence(requests[i], s, (i + np.cumsum(rng.random(
        int(rng.integers(0, 12))))).tolist()) for s in range(2)] for i in range(30)}
    written = write_token_file(io.BytesIO(), requests, sequences)
    expected = inter_token_latencies_ms(sequences)
    assert np.sort(written.itl_ms.expand()).tobytes() == np.sort(expected).tobytes()
