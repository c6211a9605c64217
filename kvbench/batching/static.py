"""`static`: request-level batching (FasterTransformer-style serving, `generate()` loops).

A batch is formed from the waiting queue (up to `max_num_seqs` and what the cache admits),
prefilled together and decoded until *every* member has finished; only then is the next
batch formed. Finished members keep their memory until the batch ends, as request-level
systems do. With a growing strategy (`paged`) a member that cannot get its next block is
preempted back to the queue (recompute), like in `continuous`.
"""

from __future__ import annotations

from collections import deque

from kvbench.batching.base import BatchingPolicy, ScheduleOutput
from kvbench.sequence import Sequence


class StaticBatching(BatchingPolicy):
    name = "static"

    def __init__(self, cache, limits) -> None:
        super().__init__(cache, limits)
        self.finished_members: list[Sequence] = []

    def on_finished(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.finished_members.append(seq)

    def holders(self) -> list[Sequence]:
        return self.running + self.finished_members

    def has_work(self) -> bool:
        return bool(self.running or self.finished_members)

    def schedule(self, waiting: deque[Sequence], now_s: float) -> ScheduleOutput:
        out = ScheduleOutput()
        if not self.running:
            for seq in self.finished_members:
                self.cache.free(seq)
            self.finished_members.clear()
            budget = self.limits.max_num_batched_tokens
            while waiting and len(self.running) < self.limits.max_num_seqs:
                seq = waiting[0]
                if seq.num_uncomputed > budget and out.scheduled:
                    break
                if not self.cache.can_admit(seq, len(self.running)):
                    break
                waiting.popleft()
                self._admit(seq, now_s)
                out.admitted.append(seq)
                out.scheduled.append((seq, seq.num_uncomputed))
                budget -= seq.num_uncomputed
            return out
        candidates = list(self.running)
        while candidates:
            seq = candidates.pop(0)
            if self._grow_or_preempt(seq, seq.num_uncomputed, candidates, waiting, out):
                out.scheduled.append((seq, seq.num_uncomputed))
        return out
