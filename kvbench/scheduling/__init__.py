"""Batching policies: each step's work from the running set and the waiting queue.

Policies register themselves (`kvbench.scheduling.registry`): a new one is one new file.
"""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    # The dicts callers used before the registry, computed on use from it.
    if name == "POLICIES":
        return {e.name: e.cls for e in policy_entries().values()}
    if name == "POLICY_SUMMARIES":
        return dict(describe_policies())
    raise AttributeError(f"module 'kvbench.scheduling' has no attribute {name!r}")


__all__ = ["BatchingPolicy", "PolicyEntry", "QueueOrder", "ScheduleOutput", "SchedulerLimits",
           "WaitingQueue", "describe_policies", "make_policy", "policy_entries", "policy_entry",
           "policy_names", "register_policy"]
