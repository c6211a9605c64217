"""`continuous`: iteration-level batching (Orca, vLLM). Sequences join and leave every step.

Default is prefill-first (vLLM's original scheduler): when waiting requests can be admitted,
the step runs only their whole prompts (up to `max_num_seqs` running and the token budget
`max_num_batched_tokens`); otherwise every running sequence decodes one token.

With `chunked_prefill`, running sequences are served in admission order within the token
budget, one token per decode and a chunk per unfinished prompt, where a chunk never takes
the tokens the decodes behind it need (so a long prompt never stalls the running decodes);
what is left of the budget goes to new prompts from the queue, cut to fit. A step that had
to preempt admits nothing new (as vLLM).

Admission keeps `watermark` free blocks back for the running sequences to grow into (the
strategy's `can_admit`). When a growing strategy cannot give a running sequence its next
block, the most recently admitted sequences are preempted (`BatchingPolicy`).
"""

from __future__ import annotations

from collections import deque

from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput, in_prefill
from kvbench.scheduling.registry import register_policy


@register_policy("continuous", "iteration-level: sequences join and leave every step (vLLM, Orca)")
class ContinuousBatching(BatchingPolicy):
    decode_runs = True  # `kvbench.engine.fast_forward`

    def decode_run_ready(self) -> bool:
        # Prefill-first admits whenever the head fits; chunked admits with the budget the
        # decodes leave. Either way a decode step decodes everyone within the budget.
        num_running = len(self.running)
        budget = self.limits.max_num_batched_tokens
        if num_running > budget:
            return False
        if self.limits.chunked_prefill and num_running == budget:
            return True
        return not self._head_admissible()

    def next_schedule_admits_only(self) -> bool:
        # Prefill-first: an admissible head means a step of prompts alone. (With n > 1 the
        # places a running sequence takes read its tokens: not taken as read-free here.)
        return (not self.limits.chunked_prefill and not self._multi_sample
                and self._head_admissible())

    def decodes_first_budget(self, num_held: int = 0) -> int | None:
        return None  # (`kvbench.engine.fast_forward.RunPolicy`: no mixed steps taken)

    def admit_in_budget(self, now_s: float, budget: int) -> ScheduleOutput:
        raise NotImplementedError("no mixed steps")

    def schedule(self, now_s: float) -> ScheduleOutput:
        if self.limits.chunked_prefill:
            return self._schedule_chunked(now_s)
        out = ScheduleOutput()
        self._admit_whole_prompts(now_s, out)
        if out.scheduled:
            return out
        self._schedule_decodes(list(self.running), out)
        if not out.scheduled:  # everything running was preempted: start over from the queue
            self._admit_whole_prompts(now_s, out)
        return out

    def _schedule_chunked(self, now_s: float) -> ScheduleOutput:
        out = ScheduleOutput()
        budget = self.limits.max_num_batched_tokens
        pending = deque(self.running)  # admission order: preemption victims come off the end
        decodes_left = sum(1 for s in pending if not in_prefill(s))
        loading = self._waits_for_kv()
        while pending and budget > 0:
            seq = pending.popleft()
            if loading and seq.seq_id in loading:
                continue
            if not in_prefill(seq):
                decodes_left -= 1
                n = 1
            else:
                # leave one token of the budget for every decode behind this prompt
                n = min(seq.num_uncomputed, budget - decodes_left)
                if n > 0:
                    n = self.cache.prefill_chunk(seq, n, self.limits.max_num_batched_tokens)
                if n <= 0:
                    continue
            preempted = len(out.preempted)
            if self._grow_or_preempt(seq, n, pending, out):
                out.scheduled.append((seq, n))
                budget -= n
            if len(out.preempted) != preempted:
                decodes_left = sum(1 for s in pending if not in_prefill(s))
        if not (out.preempted and out.scheduled):
            self._admit_chunks(now_s, out, budget)
        return out
