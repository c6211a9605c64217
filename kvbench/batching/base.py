"""The `BatchingPolicy` seam: which sequences run in the next step, and with how many tokens."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from kvbench.sequence import Sequence, SequenceStatus
from kvbench.strategies.base import CacheStrategy


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = False


@dataclass
class ScheduleOutput:
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class BatchingPolicy(ABC):
    name = "?"

    def __init__(self, cache: CacheStrategy, limits: SchedulerLimits) -> None:
        self.cache = cache
        self.limits = limits
        self.running: list[Sequence] = []  # in admission order

    @abstractmethod
    def schedule(self, waiting: deque[Sequence], now_s: float) -> ScheduleOutput:
        """Pick this step's work; admits from and preempts to `waiting` (front = next)."""

    def on_finished(self, seq: Sequence) -> None:
        """A sequence produced its last token: by default its memory goes back at once."""
        self.running.remove(seq)
        self.cache.free(seq)

    def add_running(self, seq: Sequence) -> None:
        """A forked child joins the running set directly."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def holders(self) -> list[Sequence]:
        """Sequences that hold KV memory now."""
        return self.running

    def has_work(self) -> bool:
        return bool(self.running)

    # Shared mechanics -------------------------------------------------------------------

    def _admit(self, seq: Sequence, now_s: float) -> None:
        cached = self.cache.admit(seq)
        seq.num_computed += cached
        if seq.admitted_s is None:
            seq.admitted_s = now_s
            seq.cached_prompt_tokens = cached
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def _preempt(self, seq: Sequence, waiting: deque[Sequence], out: ScheduleOutput) -> None:
        """vLLM's recompute: drop the KV, requeue at the front, prefill everything again later."""
        self.running.remove(seq)
        self.cache.free(seq)
        seq.num_computed = 0
        seq.preemptions += 1
        seq.status = SequenceStatus.WAITING
        waiting.appendleft(seq)
        out.preempted.append(seq)

    def _grow_or_preempt(
        self, seq: Sequence, num_tokens: int, candidates: list[Sequence],
        waiting: deque[Sequence], out: ScheduleOutput,
    ) -> bool:
        """Allocate for `seq`, preempting the most recently admitted candidates until it fits.

        Returns False when `seq` itself had to be preempted.
        """
        while not self.cache.allocate(seq, num_tokens):
            victim = candidates.pop() if candidates else seq
            self._preempt(victim, waiting, out)
            if victim is seq:
                return False
        return True
