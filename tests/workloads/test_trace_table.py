"""CSV traces build each request once (`trace_table.py`), with what the generic
copy-per-step path gives (`trace_reference.py`): ids, arrival times to the bit, prompts (row,
length, drawn ids), output lengths, clipping, notes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from kvbench.workloads import load_workload, read_trace
from kvbench.workloads.csv_trace import AZURE, BURSTGPT
from tests.benchmarks.burstgpt_shaped import write_burstgpt_shaped_csv
from tests.workloads.trace_reference import reference_workload, request_fields

DATA = Path(__file__).parent / "data"
VOCAB = 128_256
TIME_SCALE = 0.02712697328476017  # the BurstGPT benchmark's


def _load(path, num_requests=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_workload(str(path), num_requests, 0, VOCAB, **kwargs)


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    """A BurstGPT-shaped trace of 100,000 rows (2% failed)."""
    return write_burstgpt_shaped_csv(tmp_path_factory.mktemp("trace") / "b.csv", 100_000)


@pytest.mark.parametrize("options", [
    {"max_model_len": 8192, "time_scale": TIME_SCALE},  # kvbench simulate's
    {"max_model_len": 1024},  # half of the requests clipped
    {"max_model_len": None, "time_scale": 3.0},
    {"max_model_len": 4096, "request_rate": 20.0, "burstiness": 0.5},
])
def test_a_large_trace_gives_the_requests_of_the_copying_path(shaped, options):
    result = _load(shaped, **options)
    expected, num_clipped = reference_workload(shaped, BURSTGPT, None, 0, VOCAB,
                                               **options)
    assert result.num_clipped == num_clipped
    assert len(result.requests) == len(expected) > 97_000
    assert [request_fields(r) for r in result.requests] == \
        [request_fields(r) for r in expected]
    # the prompts would be drawn alike: from the same stream, rows of the same lengths
    # (drawing 70 million ids takes too long here; the next test draws them)
    ours, theirs = result.requests[0].prompt_token_ids._rows, expected[0].prompt_token_ids._rows
    assert np.array_equal(ours._draw.args[0], theirs._draw.args[0])
    assert ours._draw.func.__self__._rng.bit_generator.state == \
        theirs._draw.func.__self__._rng.bit_generator.state


def test_the_first_requests_of_a_large_trace(shaped):
    result = _load(shaped, 5000, max_model_len=2048)
    expected, _ = reference_workload(shaped, BURSTGPT, 5000, 0, VOCAB,
                                     max_model_len=2048)
    assert result.requests == expected  # prompts compared token by token
    assert result.notes == (f"{shaped}: 106 rows left out (failed requests: 0 response or "
                            "request tokens); 5000 replayed",)


@pytest.mark.parametrize("name", ["azure.csv", "burstgpt.csv"])
def test_small_traces_in_every_mode(name):
    fmt = AZURE if name == "azure.csv" else BURSTGPT
    for options in ({}, {"max_model_len": 512}, {"time_scale": 0.5, "max_model_len": 300},
                    {"request_rate": 2.0, "max_model_len": 64}):
        for num_requests in (None, 1, 3):
            result = _load(DATA / name, num_requests, **options)
            expected, num_clipped = reference_workload(DATA / name, fmt, num_requests, 0,
                                                       VOCAB, **options)
            assert result.requests == expected and result.num_clipped == num_clipped
            assert [request_fields(r) for r in result.requests] == \
                [request_fields(r) for r in expected]


def test_read_trace_gives_the_requests_in_file_order():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        requests = read_trace(DATA / "burstgpt.csv", None, 0, VOCAB)
    assert [r.request_id for r in requests] == [0, 1, 2, 3]
    assert [r.arrival_s for r in requests] == [0.0, 113.0, 135.0, 136.0]
    assert [r.prompt_token_ids._index for r in requests] == [0, 1, 2, 3]
