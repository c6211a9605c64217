"""`continuous`: iteration-level batching (Orca, vLLM). Sequences join and leave every step.

Default is prefill-first (vLLM's original scheduler): when waiting requests can be admitted,
the step runs only their prefills; otherwise every running sequence decodes one token.
With `chunked_prefill`, decodes are scheduled first and prompts fill the remaining token
budget in chunks, so a long prompt never stalls the running decodes.
"""

from __future__ import annotations

from collections import deque

from kvbench.batching.base import BatchingPolicy, ScheduleOutput
from kvbench.sequence import Sequence


class ContinuousBatching(BatchingPolicy):
    name = "continuous"

    def schedule(self, waiting: deque[Sequence], now_s: float) -> ScheduleOutput:
        if self.limits.chunked_prefill:
            return self._schedule_chunked(waiting, now_s)
        out = ScheduleOutput()
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
        if out.scheduled:
            return out
        return self._schedule_running(waiting, out)

    def _schedule_running(self, waiting: deque[Sequence], out: ScheduleOutput) -> ScheduleOutput:
        """Every running sequence computes its uncomputed tokens (1 when decoding)."""
        candidates = list(self.running)
        scheduled: list[tuple[Sequence, int]] = []
        while candidates:
            seq = candidates.pop(0)
            if self._grow_or_preempt(seq, seq.num_uncomputed, candidates, waiting, out):
                scheduled.append((seq, seq.num_uncomputed))
        out.scheduled.extend(scheduled)
        return out

    def _schedule_chunked(self, waiting: deque[Sequence], now_s: float) -> ScheduleOutput:
        out = ScheduleOutput()
        budget = self.limits.max_num_batched_tokens
        candidates = list(self.running)
        # Decodes first, oldest first; then running prefills that were cut into chunks.
        candidates.sort(key=lambda s: 0 if s.is_decoding else 1)
        decoding = [s for s in candidates if s.is_decoding]
        ordered = decoding + [s for s in candidates if not s.is_decoding]
        pending = list(ordered)
        while pending and budget > 0:
            seq = pending.pop(0)
            n = min(seq.num_uncomputed, budget)
            if self._grow_or_preempt(seq, n, pending, waiting, out):
                out.scheduled.append((seq, n))
                budget -= n
        if out.preempted:
            return out
        while waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs:
            seq = waiting[0]
            if not self.cache.can_admit(seq, len(self.running)):
                break
            waiting.popleft()
            self._admit(seq, now_s)
            out.admitted.append(seq)
            n = min(seq.num_uncomputed, budget)
            out.scheduled.append((seq, n))
            budget -= n
        return out
