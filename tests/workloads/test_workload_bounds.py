"""Sizes checked before they are allocated: a trace's long prompts are clipped without being
built, its absurd counts refused by line, and a workload that cannot fit in memory refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.workloads import MAX_TRACE_TOKENS, check_workload_fits, load_trace, load_workload
from kvbench.workloads.bounds import REQUEST_BYTES, TOKEN_BYTES

VOCAB = 1000


def write_lines(path, *objs) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def test_a_long_prompt_is_clipped_without_being_built(tmp_path):
    """Ten million tokens on a 64-token model: the request holds 63 prompt tokens, built in
    well under a second (building the whole prompt first took seconds and gigabytes)."""
    trace = write_lines(tmp_path / "t.jsonl", {"prompt_len": 10_000_000, "output_len": 5},
                        {"prompt_len": 8, "output_len": 4})
    start = time.perf_counter()
    result = load_workload(trace, None, 0, VOCAB, max_model_len=64)
    assert time.perf_counter() - start < 1.0
    long, short = result.requests
    assert (long.prompt_len, long.output_len) == (63, 1)
    assert (short.prompt_len, short.output_len) == (8, 4)
    assert result.num_clipped == 1  # still counted, and still reported as clipped


def test_a_capped_prompt_still_shares_its_history_and_prefix(tmp_path):
    trace = write_lines(
        tmp_path / "t.jsonl",
        {"prompt_len": 5_000_000, "output_len": 1, "conversation_id": "c"},
        {"prompt_len": 6_000_000, "output_len": 1, "conversation_id": "c"},
        {"prompt_len": 100, "output_len": 1, "prefix_id": "p", "prefix_len": 90},
        {"prompt_len": 7_000_000, "output_len": 1, "prefix_id": "p", "prefix_len": 3_000_000},
    )
    first, second, short, long = load_trace(trace, None, 0, VOCAB, max_model_len=64)
    assert first.prompt_len == second.prompt_len == long.prompt_len == 64
    assert second.prompt_token_ids == first.prompt_token_ids  # the history, token for token
    assert long.prompt_token_ids[:64] == short.prompt_token_ids[:64]  # the shared prefix


@pytest.mark.parametrize(("key", "line"), [("prompt_len", 1), ("output_len", 1), ("n", 1)])
def test_a_count_past_any_context_names_the_line_and_limit(tmp_path, key, line):
    obj = {"prompt_len": 4, "output_len": 2, key: MAX_TRACE_TOKENS + 1}
    trace = write_lines(tmp_path / "t.jsonl", obj)
    with pytest.raises(KvbenchInputError,
                       match=rf"t.jsonl:{line}: {key} 16,777,217 is more than 16,777,216"):
        load_trace(trace, None, 0, VOCAB)


def test_the_longest_count_allowed_is_read(tmp_path):
    trace = write_lines(tmp_path / "t.jsonl",
                        {"prompt_len": MAX_TRACE_TOKENS, "output_len": MAX_TRACE_TOKENS})
    (request,) = load_trace(trace, None, 0, VOCAB, max_model_len=16)
    assert request.prompt_len == 16 and request.output_len == MAX_TRACE_TOKENS


def test_memory_need_is_requests_and_tokens():
    need = 10 * REQUEST_BYTES + 100 * TOKEN_BYTES
    check_workload_fits(10, 100, "x", available_bytes=need)  # exactly enough: no error
    with pytest.raises(KvbenchInputError, match=r"x: 10 requests and 100 prompt tokens need"):
        check_workload_fits(10, 100, "x", available_bytes=need - 1)


def test_a_trace_that_cannot_fit_is_refused_by_its_name(tmp_path, monkeypatch):
    monkeypatch.setattr("kvbench.workloads.bounds.cpu_available_bytes", lambda: 10_000)
    trace = write_lines(tmp_path / "t.jsonl", *[{"prompt_len": 100, "output_len": 1}] * 20)
    with pytest.raises(KvbenchInputError, match=r"t.jsonl: 20 requests and 2,000 prompt tokens"):
        load_trace(trace, None, 0, VOCAB)
    monkeypatch.setattr("kvbench.workloads.bounds.cpu_available_bytes", lambda: None)
    assert len(load_trace(trace, None, 0, VOCAB)) == 20  # memory unknown: not a refusal


def test_a_request_count_no_machine_holds_is_refused_before_generation():
    start = time.perf_counter()
    with pytest.raises(KvbenchInputError, match=r"--num-requests: 1,000,000,000,000 requests"):
        load_workload("uniform", 10**12, 0, VOCAB)
    assert time.perf_counter() - start < 1.0


def test_a_burstgpt_trace_is_checked_for_its_prompt_ids_when_they_are_drawn(monkeypatch):
    # BurstGPT's prompts are drawn only if something reads them (a simulation under paged
    # never does): loading checks the requests, the first read the ids' memory.
    trace = Path(__file__).parent / "data" / "burstgpt.csv"  # 4 rows kept, 2,540 prompt tokens
    monkeypatch.setattr("kvbench.workloads.bounds.cpu_available_bytes", lambda: 40_000)
    requests = load_workload(str(trace), None, 0, VOCAB).requests
    assert [r.prompt_len for r in requests] == [472, 417, 1360, 291]
    with pytest.raises(KvbenchInputError, match=r"2,540 prompt tokens need"):
        requests[0].prompt_token_ids[0]
