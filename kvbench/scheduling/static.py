"""`static`: request-level batching (FasterTransformer-style serving, `generate()` loops).

A batch is formed from the waiting queue when nothing runs: up to `max_num_seqs` sequences,
in queue order (first come first served unless `--queue-order` says otherwise), as long as
the cache admits them (for `contiguous`, each gets its whole reservation). The batch
prefills (its prompts packed into steps of at most `max_num_batched_tokens` tokens; with
`chunked_prefill` a prompt may be cut), then decodes together, one token per member per
step, until *every* member has finished; only then is the next batch formed, and requests
that arrived meanwhile wait. Finished members keep their memory until the batch ends, as
request-level systems do.

With a growing strategy (`paged`) a member that cannot get its next block is preempted back
to the queue (recompute, most recently admitted first) and runs again in a later batch.
"""

from __future__ import annotations

from collections import deque

from kvbench.core.sequence import Sequence
from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput, in_prefill
from kvbench.scheduling.limits import SchedulerLimits
from kvbench.scheduling.queue_order import QueueOrder
from kvbench.scheduling.registry import register_policy
from kvbench.strategies.base import CacheStrategy


@register_policy("static", "request-level: a batch runs until every member is done")
class StaticBatching(BatchingPolicy):

    def __init__(self, cache: CacheStrategy, limits: SchedulerLimits,
                 queue_order: QueueOrder | None = None) -> None:
        super().__init__(cache, limits, queue_order)
        self.finished_members: list[Sequence] = []

    decode_runs = True  # `kvbench.engine.fast_forward`
    frees_at_finish = False  # a member's memory goes back when its batch ends

    def decode_run_ready(self) -> bool:
        # A decoding batch admits nothing until it ends; it decodes every member in the budget.
        return 0 < len(self.running) <= self.limits.max_num_batched_tokens

    def next_schedule_admits_only(self) -> bool:
        return False  # a batch is formed when nothing runs

    def decodes_first_budget(self, num_held: int = 0) -> int | None:
        return None  # (`kvbench.engine.fast_forward.RunPolicy`: no mixed steps taken)

    def admit_in_budget(self, now_s: float, budget: int) -> ScheduleOutput:
        raise NotImplementedError("no mixed steps")

    def on_finished(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.finished_members.append(seq)

    def holders(self) -> list[Sequence]:
        return self.running + self.finished_members

    def has_work(self) -> bool:
        return bool(self.running or self.finished_members)

    def release_finished(self) -> None:
        for seq in self.finished_members:
            self.cache.free(seq)
        self.finished_members.clear()

    def schedule(self, now_s: float) -> ScheduleOutput:
        out = ScheduleOutput()
        if not self.running:
            self._form_batch(now_s, out)
        prefilling = [s for s in self.running if in_prefill(s)]
        if prefilling:
            self._schedule_prefills(prefilling, out)
            return out
        self._schedule_decodes(list(self.running), out)
        if not self.running:  # the last members were preempted: the batch is over
            self._form_batch(now_s, out)
            self._schedule_prefills(list(self.running), out)
        return out

    def _form_batch(self, now_s: float, out: ScheduleOutput) -> None:
        """End the batch (its finished members give their memory back) and admit the next."""
        self.release_finished()
        for _ in self._admit_from_queue(now_s, out):
            pass

    def _schedule_prefills(self, prefilling: list[Sequence], out: ScheduleOutput) -> None:
        """Members' prompts, in admission order, packed into this step's token budget."""
        budget = self.limits.max_num_batched_tokens - out.num_tokens
        pending = deque(prefilling)
        loading = self._waits_for_kv()
        while pending and budget > 0:
            seq = pending.popleft()
            if loading and seq.seq_id in loading:
                continue
            n = seq.num_uncomputed
            if self.limits.chunked_prefill:
                n = min(n, budget)
            elif n > budget and out.scheduled:
                break
            n = self.cache.prefill_chunk(seq, n, self.limits.max_num_batched_tokens)
            if not n:  # a hybrid's chunk cut to nothing (`align`): it waits
                continue
            if self._grow_or_preempt(seq, n, pending, out):
                out.scheduled.append((seq, n))
                budget -= n
