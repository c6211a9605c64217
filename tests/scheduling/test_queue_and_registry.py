"""The waiting queue's order and the batching-policy and queue-order registries."""

from __future__ import annotations

import pytest

from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.scheduling import (
    POLICIES,
    QUEUE_ORDERS,
    QueueOrder,
    SchedulerLimits,
    WaitingQueue,
    make_policy,
)
from kvbench.scheduling.continuous import ContinuousBatching
from kvbench.scheduling.shortest_job_first import ShortestJobFirst
from kvbench.scheduling.static import StaticBatching
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


def test_registries_list_every_policy_and_queue_order_default_first():
    assert POLICIES.names()[0] == "continuous"
    assert {"continuous", "static"} <= set(POLICIES.names())
    assert "sjf" not in POLICIES, "shortest-job-first is a queue order, not a policy"
    assert [name for name, _ in POLICIES.describe()] == POLICIES.names()
    assert QUEUE_ORDERS.names()[0] == "fcfs" and "sjf" in QUEUE_ORDERS
    assert all(summary for _, summary in QUEUE_ORDERS.describe())


@pytest.mark.parametrize("batching, cls", [("continuous", ContinuousBatching),
                                            ("static", StaticBatching)])
def test_every_policy_takes_every_queue_order(batching, cls):
    cache = make_strategy("paged", 256, 64)
    default = make_policy(batching, cache, SchedulerLimits())
    assert type(default.waiting.order) is QueueOrder and default.waiting.order.name == "fcfs"
    policy = make_policy(batching, cache, SchedulerLimits(), queue_order="sjf")
    assert isinstance(policy, cls) and policy.name == batching
    assert isinstance(policy.waiting.order, ShortestJobFirst) and policy.waiting.order.name == "sjf"


def test_static_with_sjf_forms_its_batch_from_the_shortest_jobs():
    policy = make_policy("static", make_strategy("paged", 1024, 128),
                         SchedulerLimits(max_num_seqs=2), queue_order="sjf")
    # lengths 40, 35, 10, 12: a batch of two takes the two shortest, the shortest first
    for seq in (_seq(0, 30, 10, 0.0), _seq(1, 5, 30, 0.1), _seq(2, 8, 2, 0.2),
                _seq(3, 2, 10, 0.3)):
        policy.add(seq)
    assert [s.seq_id for s in policy.waiting] == [2, 3, 1, 0]
    out = policy.schedule(now_s=0.0)
    assert [s.seq_id for s in out.admitted] == [2, 3]
    assert [s.seq_id for s in policy.waiting] == [1, 0]


def test_unknown_policy_is_a_user_error_naming_the_choices():
    with pytest.raises(KvbenchInputError, match="unknown --batching 'lottery'.*continuous"):
        make_policy("lottery", make_strategy("paged", 256, 64), SchedulerLimits())


def test_a_queue_order_as_batching_points_to_queue_order():
    with pytest.raises(KvbenchInputError) as raised:
        make_policy("sjf", make_strategy("paged", 256, 64), SchedulerLimits())
    message = str(raised.value)
    assert "unknown --batching 'sjf'" in message and "use --queue-order sjf" in message
    assert "\n" not in message


def test_unknown_queue_order_is_a_user_error_naming_the_choices():
    choices = r"unknown --queue-order 'lifo' \(choose from fcfs, sjf"
    with pytest.raises(KvbenchInputError, match=choices):
        make_policy("continuous", make_strategy("paged", 256, 64), SchedulerLimits(),
                    queue_order="lifo")
