"""Batching policies and queue orders: each step's work from the running set and the waiting
queue.

Policies and queue orders register themselves (`kvbench.scheduling.registry`): a new one is
one new file.
"""

from kvbench.scheduling.limits import SchedulerLimits
from kvbench.scheduling.queue_order import QueueOrder, WaitingQueue
from kvbench.scheduling.registry import POLICIES, QUEUE_ORDERS, make_policy

__all__ = ["POLICIES", "QUEUE_ORDERS", "QueueOrder", "SchedulerLimits", "WaitingQueue",
           "make_policy"]
