"""The token file: `tokens.parquet` holds each sample's token times as the run's doubles, in
the documented schema; an older folder's `tokens.jsonl` still reads back; a damaged file is
refused with the file named."""

from __future__ import annotations

import io
import itertools
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.results.files import atomic_file
from kvbench.results.token_file import write_token_file
from kvbench.results.token_times import (
    JSONL_TOKENS_FILE,
    TOKENS_FILE,
    pooled_gaps_s,
    read_token_arrays,
    read_token_times,
)
from tests.results.token_steps import add_token_times

TIMES = [0.1 + 0.2, 1e-7, 5e-7, 0.0078125, 1.0000005, 12.0, 0.0, 3600.000001,
         123_456_789.123456, 1e16, 5e-324]


def _sequence(request: Request, sample: int, times: list[float]) -> Sequence:
    seq = Sequence(request.request_id * 10 + sample, request, sample,
                   list(request.prompt_token_ids))
    add_token_times(seq, times)
    return seq


def _write(folder, requests, sequences):
    with atomic_file(folder / TOKENS_FILE) as handle:  # as the runner writes it
        return write_token_file(handle, requests, sequences)


def test_the_file_is_the_documented_table_and_reads_back(tmp_path):
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3, n=2)
                for i in range(4)]
    times = {0: [[0.1 + 0.2, 1.25], [0.5]], 1: [[], TIMES], 2: [[7.0], [8.0]]}
    sequences = {i: [_sequence(requests[i], s, t) for s, t in reversed(list(enumerate(ts)))]
                 for i, ts in times.items()}  # (request 3 never ran: no rows)
    written = _write(tmp_path, requests, sequences)
    table = pq.read_table(tmp_path / TOKENS_FILE)
    assert table.schema.names == ["request_id", "sample", "token_times_s"]
    assert table.to_pylist() == [{"request_id": i, "sample": s, "token_times_s": ts}
                                 for i, samples in times.items()
                                 for s, ts in enumerate(samples)]
    assert read_token_times(tmp_path) == times  # the very doubles
    read = read_token_arrays(tmp_path)
    # A session hands its report the arrays from memory: what reading the file gives.
    for field in ("request_ids", "samples", "starts", "times_s"):
        assert getattr(written.times, field).tobytes() == getattr(read, field).tobytes()


def test_an_older_folders_jsonl_reads_back(tmp_path):
    rng = np.random.default_rng(1)
    series = [np.round(np.sort(rng.uniform(0, 3000, int(n))), 6).tolist()
              for n in rng.integers(0, 200, 50)]
    lines = [json.dumps({"request_id": i, "sample": 0, "token_times_s": s},
                        separators=(",", ":")) for i, s in enumerate(series)]
    # Written by another tool: spaces, other key order, exponents, no sample.
    lines.append('{"token_times_s": [1e-05, 2.5E+1, 3], "request_id": 99}')
    (tmp_path / JSONL_TOKENS_FILE).write_text("\n".join(lines) + "\n\n")
    arrays = read_token_arrays(tmp_path)
    expected = [float(t) for line in lines for t in json.loads(line)["token_times_s"]]
    assert arrays.times_s.tolist() == expected  # exact, not approximately
    assert [a.tolist() for a in arrays.sample_times()] == [*series, [1e-05, 25.0, 3.0]]
    assert arrays.request_ids.tolist() == [*range(50), 99]
    assert arrays.samples.tolist() == [0] * 51


@pytest.mark.parametrize("bad", ['{"request_id":1,"sample":0,"token_times_s":[0.1,,0.2]}',
                                 '{"request_id":1,"sample":0,"token_times_s":[01.5]}',
                                 '{"request_id":1,"sample":0}', "not json"])
def test_a_damaged_jsonl_is_refused_naming_the_file(tmp_path, bad):
    good = '{"request_id":0,"sample":0,"token_times_s":[0.1,0.2]}'
    (tmp_path / JSONL_TOKENS_FILE).write_text(f"{good}\n{bad}\n{good}\n")
    with pytest.raises(KvbenchInputError, match=JSONL_TOKENS_FILE):
        read_token_arrays(tmp_path)


def test_a_damaged_parquet_is_refused_naming_the_file(tmp_path):
    (tmp_path / TOKENS_FILE).write_bytes(b"PAR1 not really")
    with pytest.raises(KvbenchInputError, match=TOKENS_FILE):
        read_token_arrays(tmp_path)


def test_a_folder_without_token_times_has_none(tmp_path):
    assert read_token_arrays(tmp_path) is None and read_token_times(tmp_path) is None


def test_pooled_gaps_leave_out_the_gap_between_samples():
    samples = [[1.0, 1.5, 2.5], [], [7.0], [3.0, 3.25]]
    starts = np.cumsum([0, *map(len, samples)])
    gaps = pooled_gaps_s(np.concatenate([np.asarray(s) for s in samples]), starts)
    assert gaps.tolist() == [0.5, 1.0, 0.25]


def test_written_itls_are_the_engines(tmp_path):
    """The summary takes its ITLs from the pass that writes the token file, as gaps with
    counts: expanded, they must be the very doubles of each sample's consecutive token times'
    differences, in milliseconds."""
    rng = np.random.default_rng(5)
    requests = [Request(i, arrival_s=0.0, prompt_token_ids=(1,), output_len=3, n=2)
                for i in range(30)]
    sequences = {i: [_sequence(requests[i], s, (i + np.cumsum(rng.random(
        int(rng.integers(0, 12))))).tolist()) for s in range(2)] for i in range(30)}
    written = write_token_file(io.BytesIO(), requests, sequences)
    expected = np.array([b - a for seqs in sequences.values() for seq in seqs
                         for a, b in itertools.pairwise(seq.token_times_s)]) * 1e3
    assert np.sort(written.itl_ms.expand()).tobytes() == np.sort(expected).tobytes()
