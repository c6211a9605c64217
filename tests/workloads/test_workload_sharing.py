"""Prefix sharing is real: identical token ids, not just matching labels."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.workloads import chat, load_workload, prefix_repeat

VOCAB = 32_000


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def by_conversation(requests):
    conversations = defaultdict(list)
    for r in requests:
        conversations[r.conversation_id].append(r)
    return conversations


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    num=st.integers(1, 60),
    turns=st.integers(1, 6),
    think=st.sampled_from([0.0, 1.5]),
)
def test_chat_turns_share_history_token_for_token(seed, num, turns, think):
    requests = load_workload(
        "chat", num, seed, VOCAB, turns_per_conversation=turns, think_time_s=think
    ).requests
    low, high = chat.DEFAULTS["user_len"]
    for turns_of_one in by_conversation(requests).values():
        assert len(turns_of_one) <= turns
        for earlier, later in zip(turns_of_one, turns_of_one[1:], strict=False):
            # the whole earlier prompt is resent, token for token ...
            assert later.prompt_token_ids[: earlier.prompt_len] == earlier.prompt_token_ids
            # ... followed by the earlier answer and a new user message
            added = later.prompt_len - earlier.prompt_len - earlier.output_len
            assert low <= added <= high
            # turn k+1 arrives after turn k (or with it, when think time is 0)
            assert later.arrival_s - earlier.arrival_s == pytest.approx(think)


def test_chat_conversations_share_exactly_the_system_prompt():
    requests = load_workload("chat", 200, 0, VOCAB).requests
    system_len = chat.DEFAULTS["system_prompt_len"]
    firsts = [turns[0] for turns in by_conversation(requests).values()]
    system = {}
    for r in firsts:
        system.setdefault(r.prefix_id, r.prompt_token_ids[:system_len])
        assert r.prompt_token_ids[:system_len] == system[r.prefix_id]
    assert len(system) == chat.DEFAULTS["num_system_prompts"]
    assert len(set(system.values())) == len(system)
    # different conversations under one system prompt share the system prompt, then diverge
    same = [r for r in firsts if r.prefix_id == "system-0"]
    assert common_prefix(same[0].prompt_token_ids, same[1].prompt_token_ids) < system_len + 2


def test_chat_arrivals_start_conversations_and_keep_think_time():
    think = 2.0
    requests = load_workload("chat", 400, 5, VOCAB, request_rate=4.0, think_time_s=think).requests
    conversations = by_conversation(requests)
    starts = []
    for turns_of_one in conversations.values():
        start = turns_of_one[0].arrival_s
        starts.append(start)
        for k, r in enumerate(turns_of_one):
            assert r.arrival_s == pytest.approx(start + k * think)
    assert min(starts) == 0.0
    assert len(set(starts)) == len(starts)  # one process draw per conversation
    ordered = sorted(starts)
    mean_gap = (ordered[-1] - ordered[0]) / (len(ordered) - 1)
    # --request-rate counts requests: conversations start at rate / turns per conversation
    turns = len(requests) / len(conversations)
    assert mean_gap == pytest.approx(turns / 4.0, rel=0.25)  # 99 gaps: loose


def test_chat_conversations_do_not_share_history():
    # a later turn shares its history with its own conversation only
    requests = load_workload("chat", 8, 0, VOCAB).requests
    a, b = by_conversation(requests).values()
    assert a[1].prompt_token_ids[: a[0].prompt_len] != b[0].prompt_token_ids[: a[0].prompt_len]


@pytest.mark.parametrize("num_prefixes", [1, 3, 4])
def test_prefix_repeat_k_prefixes_times_m_suffixes(num_prefixes):
    num = 30
    prefix_len = prefix_repeat.DEFAULTS["prefix_len"]
    requests = load_workload("prefix-repeat", num, 0, VOCAB, num_prefixes=num_prefixes).requests
    groups = defaultdict(list)
    for r in requests:
        groups[r.prefix_id].append(r)
    assert len(groups) == num_prefixes
    sizes = sorted(len(g) for g in groups.values())
    assert sizes[-1] - sizes[0] <= 1 and sum(sizes) == num  # M = ceil or floor(num / K)
    prefixes = set()
    for group in groups.values():
        prefix = group[0].prompt_token_ids[:prefix_len]
        prefixes.add(prefix)
        suffixes = set()
        for r in group:
            assert r.prompt_token_ids[:prefix_len] == prefix
            suffixes.add(r.prompt_token_ids[prefix_len:])
        assert len(suffixes) == len(group)  # distinct suffixes
        for r, s in zip(group, group[1:], strict=False):
            assert common_prefix(r.prompt_token_ids, s.prompt_token_ids) < prefix_len + 3
    assert len(prefixes) == num_prefixes
    # round-robin: consecutive requests (offline, in order) use different prefixes
    assert [r.prefix_id for r in requests[:num_prefixes]] == [
        f"prefix-{k}" for k in range(num_prefixes)
    ]


@pytest.mark.parametrize("n", [1, 2, 8])
def test_parallel_n_samples(n):
    requests = load_workload("parallel", 25, 0, VOCAB, n=n).requests
    assert {r.n for r in requests} == {n}
    assert len({r.prompt_token_ids for r in requests}) == 25  # prompts are distinct


@pytest.mark.parametrize("name", ["sharegpt", "lmsys", "summarize", "uniform", "parallel"])
def test_independent_workloads_share_nothing(name):
    requests = load_workload(name, 100, 0, VOCAB).requests
    longest = max(
        common_prefix(a.prompt_token_ids, b.prompt_token_ids)
        for a, b in zip(requests, requests[1:], strict=False)
    )
    assert longest <= 2  # chance matches only (1 / 32000 per token)


def test_token_ids_cover_the_vocabulary():
    ids = [t for r in load_workload("uniform", 200, 0, 50).requests for t in r.prompt_token_ids]
    assert set(ids) == set(range(50))
