"""`vllm-v1`: vLLM v1's scheduler (`vllm/v1/core/sched/scheduler.py`, `Scheduler.schedule`).

There is no prefill or decode phase: every request has tokens it has computed and tokens it
has, and each step hands out a token budget (`max_num_batched_tokens`) so that requests catch
up. Chunked prefill is always on (vLLM v1's default), so `--max-num-batched-tokens` may be
below `--max-model-len`.

1. The running requests, in admission order, while budget is left: each takes
   `min(uncomputed tokens, budget left)` (one for a decode, the rest of its prompt or a
   chunk of it for a prefill). Nothing is held back for the requests behind it, as in vLLM:
   a request admitted earlier is served first.
2. When the cache cannot give a running request the memory for its tokens, the most
   recently admitted running request is preempted (recompute), the request itself last;
   the requests before it keep their tokens.
3. Only when nothing was preempted (a step that preempted every running request is empty):
   waiting requests, in queue order, while budget is left
   and fewer than `max_num_seqs` run, each with `min(uncomputed tokens, budget left)`. A
   prefix-cache hit is marked computed at admission, so only the tokens left to compute
   count against the budget (vLLM's `num_new_tokens = num_tokens - num_computed_tokens`; a
   full hit still computes its last token). The first request the cache cannot take stops
   admission: no overtaking.

Async scheduling (vLLM's default since 0.14; `Engine`, `async_scheduling`): step n + 1 is
scheduled before step n's output is seen. A token is counted as it is scheduled (vLLM's
output placeholders), so decodes go on without a gap; a request whose last token is in flight
is not scheduled again, and keeps its seat and blocks until the engine sees that token at
the next step.
"""

from __future__ import annotations

from collections import deque

from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput
from kvbench.scheduling.registry import register_policy


@register_policy(
    "vllm-v1", "vLLM v1: running first, then new prompts' chunks, in one token budget",
    engine_overrides={"chunked_prefill": True},
)
class VllmV1Batching(BatchingPolicy):
    decode_runs = True  # `kvbench.engine.fast_forward`
    models_async_scheduling = True

    def decode_run_ready(self) -> bool:
        # Running first, one token each within the budget; what is left admits the head
        # (under async, the budget of those whose last token is in flight is left too).
        if len(self.running) > self.limits.max_num_batched_tokens:
            return False
        return not self._head_admissible()

    def next_schedule_admits_only(self) -> bool:
        return False  # the running requests are scheduled first

    def decodes_first_budget(self, num_held: int = 0) -> int | None:
        # Every running request its one token (a preemption admits nothing), then the queue;
        # those whose last token is in flight take none (`_schedule_running`).
        left = self.limits.max_num_batched_tokens - len(self.running) + num_held
        return left if left >= 0 else None

    def admit_in_budget(self, now_s: float, budget: int) -> ScheduleOutput:
        out = ScheduleOutput()
        if budget > 0:
            self._admit_chunks(now_s, out, budget)
        return out

    def schedule(self, now_s: float) -> ScheduleOutput:
        out = ScheduleOutput()
        budget = self._schedule_running(out)
        # As vLLM (`if not preempted_reqs`): a step that preempted admits nothing, even one
        # that preempted every running request (an empty step: the next one admits).
        if not out.preempted:
            self._admit_chunks(now_s, out, budget)
        return out

    def _schedule_running(self, out: ScheduleOutput) -> int:
        """Step 1 and 2 of the module's list; returns the budget left."""
        budget = self.limits.max_num_batched_tokens
        pending = deque(self.running)
        loading = self._waits_for_kv()
        while pending and budget > 0:
            seq = pending.popleft()
            if len(seq.token_ids) >= seq.end_len:
                # Async scheduling: its last token is in flight (vLLM's check on
                # `num_output_placeholders`); it ends when the engine sees that token.
                continue
            if loading and seq.seq_id in loading:
                continue
            want = min(seq.num_uncomputed, budget)
            n = self.cache.prefill_chunk(seq, want, self.limits.max_num_batched_tokens)
            if want and not n:
                # A hybrid's chunk its block alignment cuts to nothing (`align`): it computes
                # nothing this step and the next running sequence is asked (vLLM's `continue`).
                continue
            if self._grow_or_preempt(seq, n, pending, out):
                out.scheduled.append((seq, n))
                budget -= n
        return budget
