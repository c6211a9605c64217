"""Batching policies and queue orders: each step's work from the running set and the waiting
queue.

Policies and queue orders register themselves (`kvbench.scheduling.registry`): a new one is
one new file.
"""

from __future__ import annotations

from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput
from kvbench.scheduling.limits import SchedulerLimits
from kvbench.scheduling.queue_order import QueueOrder, WaitingQueue
from kvbench.scheduling.registry import (
    POLICIES,
    QUEUE_ORDERS,
    PolicyEntry,
    QueueOrderEntry,
    make_policy,
    register_policy,
    register_queue_order,
)

__all__ = ["POLICIES", "QUEUE_ORDERS", "BatchingPolicy", "PolicyEntry", "QueueOrder",
           "QueueOrderEntry", "ScheduleOutput", "SchedulerLimits", "WaitingQueue", "make_policy",
           "register_policy", "register_queue_order"]
