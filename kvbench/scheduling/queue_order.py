"""The waiting queue and its order: which waiting sequence a policy considers next.

A `QueueOrder` ranks new arrivals; first-come-first-served (arrival order, `fcfs`) is the
default and every other order (`sjf`, ...) is one small subclass in a file of its own,
registered for `--queue-order`; any batching policy runs with any order. Whatever the order,
a sequence that goes back to the queue (preempted, or a forked sample with no room to share
its prompt) goes to the front, most recent first: it was admitted once already, and vLLM's
recompute resumes it first.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import ClassVar

from kvbench.core.sequence import Sequence
from kvbench.scheduling.registry import register_queue_order


@register_queue_order("fcfs", "first come, first served: arrivals wait in arrival order")
class QueueOrder:
    """First come, first served: arrivals wait in the order they were added. A subclass
    ranks them by `key` instead."""

    name: ClassVar[str]  # set by `register_queue_order`

    def key(self, seq: Sequence) -> tuple | None:
        """Rank of a new arrival (smaller goes first; ties keep arrival order), or None for
        plain arrival order."""
        return None


class WaitingQueue:
    """Sequences waiting for admission, in the order of a `QueueOrder` behind the requeued."""

    def __init__(self, order: QueueOrder | None = None) -> None:
        self.order = order or QueueOrder()
        self._front: deque[Sequence] = deque()  # requeued: ahead of every arrival
        self._arrivals: deque[Sequence] = deque()  # arrival order (key None)
        self._ranked: list[tuple[tuple, int, Sequence]] = []  # heap by (key, arrival count)
        self._count = itertools.count()

    def push(self, seq: Sequence) -> None:
        """A new arrival takes its place by the queue order."""
        key = self.order.key(seq)
        if key is None:
            self._arrivals.append(seq)
        else:
            heapq.heappush(self._ranked, (key, next(self._count), seq))

    def push_front(self, seq: Sequence) -> None:
        """A sequence coming back (preempted, unforked sample) goes ahead of everything."""
        self._front.appendleft(seq)

    def head(self) -> Sequence | None:
        """The next sequence to consider, or None when the queue is empty."""
        if self._front:
            return self._front[0]
        if self._ranked:
            return self._ranked[0][2]
        return self._arrivals[0] if self._arrivals else None

    def pop(self) -> Sequence:
        if self._front:
            return self._front.popleft()
        if self._ranked:
            return heapq.heappop(self._ranked)[2]
        return self._arrivals.popleft()

    def remove(self, seq: Sequence) -> None:
        """Take `seq` out of the queue (a preempted sequence that ended after all: under
        async scheduling its last token was in flight)."""
        if seq in self._front:
            self._front.remove(seq)
        elif seq in self._arrivals:
            self._arrivals.remove(seq)
        else:
            self._ranked = [item for item in self._ranked if item[2] is not seq]
            heapq.heapify(self._ranked)

    def __len__(self) -> int:
        return len(self._front) + len(self._ranked) + len(self._arrivals)

    def __bool__(self) -> bool:
        return bool(self._front or self._ranked or self._arrivals)

    def __iter__(self) -> Iterator[Sequence]:
        """Queue order, head first."""
        yield from self._front
        yield from (seq for *_, seq in sorted(self._ranked, key=lambda item: item[:2]))
        yield from self._arrivals
