"""Clipping to the model's maximum length: output first, then the prompt's end; counted."""

from __future__ import annotations

import re
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.workloads import (
    WORKLOADS,
    Request,
    clip_to_max_len,
    load_workload,
)


def req(prompt_len: int, output_len: int) -> Request:
    return Request(0, 0.0, tuple(range(prompt_len)), output_len)


def test_output_shortened_first_then_prompt_tail():
    requests = [req(10, 5), req(10, 30), req(40, 10), req(64, 1)]
    clipped, count = clip_to_max_len(requests, 32)
    assert count == 3
    assert (clipped[0].prompt_len, clipped[0].output_len) == (10, 5)  # fits: untouched
    assert (clipped[1].prompt_len, clipped[1].output_len) == (10, 22)
    assert (clipped[2].prompt_len, clipped[2].output_len) == (31, 1)
    assert clipped[2].prompt_token_ids == tuple(range(31))  # the head is kept
    assert (clipped[3].prompt_len, clipped[3].output_len) == (31, 1)


def test_no_limit_no_clipping():
    requests = [req(5000, 5000)]
    assert clip_to_max_len(requests, None) == (requests, 0)


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(sorted(WORKLOADS.names())),
    max_len=st.integers(2, 600),
    seed=st.integers(0, 1000),
)
def test_every_clipped_request_fits(name, max_len, seed):
    unclipped = load_workload(name, 30, seed, 1000)
    result = load_workload(name, 30, seed, 1000, max_model_len=max_len)
    too_long = sum(r.prompt_len + r.output_len > max_len for r in unclipped.requests)
    assert result.num_clipped == too_long
    for before, after in zip(unclipped.requests, result.requests, strict=True):
        assert after.prompt_len + after.output_len <= max_len
        assert after.prompt_len >= 1 and after.output_len >= 1
        assert after.prompt_token_ids == before.prompt_token_ids[: after.prompt_len]


def test_clip_message_gives_the_count():
    result = load_workload("sharegpt", 1000, 0, 32_000, max_model_len=1024)
    match = re.match(r"^(\d+) of 1000 requests clipped to --max-model-len 1024 ",
                     result.clip_message)
    count = int(match.group(1))
    assert count > 0 and count == result.num_clipped
    assert all(r.prompt_len + r.output_len <= 1024 for r in result.requests)


def test_no_warning_when_nothing_clipped():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_workload("uniform", 10, 0, 100, max_model_len=256)
    assert load_workload("uniform", 10, 0, 100, max_model_len=256).clip_message is None


def test_clipped_chat_still_shares_its_prefix():
    result = load_workload("chat", 40, 0, 32_000, max_model_len=200)
    assert result.num_clipped > 0
    by_conv: dict[str, list[Request]] = {}
    for r in result.requests:
        by_conv.setdefault(r.conversation_id, []).append(r)
    for turns in by_conv.values():
        for a, b in zip(turns, turns[1:], strict=False):
            shared = min(a.prompt_len, b.prompt_len)
            assert a.prompt_token_ids[:shared] == b.prompt_token_ids[:shared]
