"""Batching policies: each step's work from the running set and the waiting queue.

Policies register themselves (`kvbench.scheduling.registry`): a new one is one new file.
"""

from __future__ import annotations

from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput
from kvbench.scheduling.limits import SchedulerLimits
from kvbench.scheduling.queue_order import QueueOrder, WaitingQueue
from kvbench.scheduling.registry import (
    PolicyEntry,
    describe_policies,
    make_policy,
    policy_entries,
    policy_entry,
    policy_names,
    register_policy,
)

__all__ = ["BatchingPolicy", "PolicyEntry", "QueueOrder", "ScheduleOutput", "SchedulerLimits",
           "WaitingQueue", "describe_policies", "make_policy", "policy_entries", "policy_entry",
           "policy_names", "register_policy"]
