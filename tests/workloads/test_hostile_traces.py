"""Files that are not traces, or traces built to exhaust the reader: one input error each,
with bounded memory and no traceback."""

from __future__ import annotations

import json
import os
import random

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.workloads import load_workload

VOCAB = 1000
FORMATS = "kvbench or Mooncake JSON lines, a ShareGPT JSON list, or an Azure or BurstGPT CSV"


def refused(path, match, num_requests=None):
    with pytest.raises(KvbenchInputError, match=match) as info:
        load_workload(str(path), num_requests, 0, VOCAB)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("name", ["trace.jsonl", "trace.json", "data.bin"])
def test_random_bytes_are_not_a_trace(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"[" + random.Random(0).randbytes(100_000))
    message = refused(path, "not a trace kvbench can read")
    assert FORMATS in message and "tokenizer" not in message


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused_after_a_bounded_read():
    refused("/dev/zero", r"^/dev/zero: not a trace kvbench can read \(binary data\)")


def test_text_that_is_no_trace_names_the_formats(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# notes\nsome text\n")
    assert FORMATS in refused(path, "first line is neither a JSON object or list nor a known "
                                    "CSV header")


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_deeply_nested_line_is_one_bad_line(tmp_path, opening):
    path = tmp_path / "deep.jsonl"
    close = "]" if opening == "[" else "}"
    path.write_text(opening * 100_000 + "1" + close * 100_000 + "\n")
    refused(path, r"deep.jsonl:1: JSON nested too deeply")


def test_a_line_past_the_bound_is_refused(tmp_path):
    path = tmp_path / "long.jsonl"
    with path.open("w") as out:
        out.write(json.dumps({"prompt_len": 4, "output_len": 4}) + "\n")
        out.write('{"pad": "' + "x" * (65 << 20) + '"}\n')
    refused(path, r"line 2 is longer than 64 MiB")
    assert len(load_workload(str(path), 1, 0, VOCAB).requests) == 1  # never reached


def test_bad_lines_stop_reading_at_the_bound(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps({"request_id": i, "tokens": [1, 2]}) + "\n"
                            for i in range(10_000)))
    refused(path, r"results.jsonl:1: needs prompt_len or prompt_tokens "
                  r"\(and 99 more bad lines; reading stopped at line 100\)$", 10)


def test_mooncake_line_with_many_hash_ids(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    line = {"timestamp": 0, "input_length": 700, "output_length": 5,
            "hash_ids": list(range(20_000))}
    path.write_text(json.dumps(line) + "\n")
    (request,) = load_workload(str(path), None, 0, VOCAB).requests
    assert (request.prompt_len, request.output_len) == (700, 5)
    del line["input_length"]
    path.write_text(json.dumps(line) + "\n")
    refused(path, r"mooncake.jsonl:1: needs input_length \(the prompt's tokens")


@pytest.mark.parametrize("rate", [1e-300, 1e-12])
def test_arrivals_past_the_bound_are_refused(rate):
    with pytest.raises(KvbenchInputError, match=r"past the 10,000,000,000 s \(316.9 years\) "
                                                r"kvbench replays: raise --request-rate"):
        load_workload("sharegpt", 20, 0, VOCAB, request_rate=rate)
    load_workload("sharegpt", 20, 0, VOCAB, request_rate=1e-6)  # ~231 days: replayed


def test_a_time_scale_past_the_bound_is_refused(tmp_path):
    path = tmp_path / "timed.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": t, "prompt_len": 4, "output_len": 2})
                            + "\n" for t in (0.0, 1.5)))
    assert load_workload(str(path), None, 0, VOCAB, time_scale=1e9).requests[1].arrival_s \
        == 1.5e9
    with pytest.raises(KvbenchInputError, match="lower --time-scale"):
        load_workload(str(path), None, 0, VOCAB, time_scale=1e300)
