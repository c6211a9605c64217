"""The waiting queue's order and the batching-policy registry."""

from __future__ import annotations

import pytest

from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.scheduling import (
    QueueOrder,
    SchedulerLimits,
    WaitingQueue,
    describe_policies,
    make_policy,
    policy_names,
)
from kvbench.scheduling.shortest_job_first import ShortestJobFirst, ShortestJobFirstBatching
from kvbench.strategies import make_strategy
from tests.scheduling.helpers import request


def _seq(i: int, prompt_len: int, output_len: int, arrival_s: float = 0.0) -> Sequence:
    req = request(i, range(prompt_len), output_len, arrival_s=arrival_s)
    return Sequence(i, req, 0, list(req.prompt_token_ids))


def test_fcfs_keeps_arrival_order_and_requeued_sequences_go_first():
    queue = WaitingQueue(QueueOrder())
    a, b, c, d = (_seq(i, 10 - i, 4) for i in range(4))
    for seq in (a, b, c):
        queue.push(seq)
    queue.push_front(d)
    assert [s.seq_id for s in queue] == [3, 0, 1, 2] and queue.head() is d and len(queue) == 4
    assert [queue.pop().seq_id for _ in range(4)] == [3, 0, 1, 2] and not queue


def test_sjf_orders_by_prompt_plus_output_ties_by_arrival():
    queue = WaitingQueue(ShortestJobFirst())
    jobs = [_seq(0, 30, 10, 0.0), _seq(1, 5, 30, 0.1), _seq(2, 8, 2, 0.2), _seq(3, 2, 8, 0.3)]
    for seq in jobs:
        queue.push(seq)
    preempted = _seq(4, 100, 100, 0.4)
    queue.push_front(preempted)
    # lengths 40, 35, 10, 10: the two 10s by arrival; the preempted one goes first
    assert [s.seq_id for s in queue] == [4, 2, 3, 1, 0]
    assert [queue.pop().seq_id for _ in range(5)] == [4, 2, 3, 1, 0]


def test_registry_lists_every_policy_and_builds_them():
    assert policy_names()[0] == "continuous"
    assert {"continuous", "static", "sjf"} <= set(policy_names())
    assert [name for name, _ in describe_policies()] == policy_names()
    cache = make_strategy("paged", 256, 64)
    policy = make_policy("sjf", cache, SchedulerLimits())
    assert isinstance(policy, ShortestJobFirstBatching) and policy.name == "sjf"
    assert isinstance(policy.waiting.order, ShortestJobFirst)


def test_unknown_policy_is_a_user_error_naming_the_choices():
    with pytest.raises(KvbenchInputError, match="unknown --batching 'lottery'.*continuous"):
        make_policy("lottery", make_strategy("paged", 256, 64), SchedulerLimits())
