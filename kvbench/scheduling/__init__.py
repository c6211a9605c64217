"""Batching policies: `continuous` (iteration-level) and `static` (request-level)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput, SchedulerLimits
from kvbench.scheduling.continuous import ContinuousBatching
from kvbench.scheduling.static import StaticBatching

POLICIES: dict[str, type[BatchingPolicy]] = {
    "continuous": ContinuousBatching,
    "static": StaticBatching,
}

POLICY_SUMMARIES = {
    "continuous": "iteration-level: sequences join and leave every step (vLLM, Orca)",
    "static": "request-level: a batch runs until every member is done",
}


def make_policy(name: str, cache, limits: SchedulerLimits) -> BatchingPolicy:
    try:
        return POLICIES[name](cache, limits)
    except KeyError:
        raise KvbenchInputError(
            f"unknown --batching {name!r} (choose from {', '.join(POLICIES)})"
        ) from None


__all__ = ["BatchingPolicy", "ScheduleOutput", "SchedulerLimits", "POLICIES", "make_policy"]
