"""The `BatchingPolicy` seam: which sequences run in the next step, and with how many tokens."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kvbench.core.sequence import Sequence, SequenceStatus
from kvbench.scheduling.limits import SchedulerLimits
from kvbench.scheduling.queue_order import QueueOrder, WaitingQueue
from kvbench.strategies.base import CacheStrategy


@dataclass
class ScheduleOutput:
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled) if self.scheduled else 0


def in_prefill(seq: Sequence) -> bool:
    """Whether the sequence has more than its last sampled token to (re)compute: a new
    prompt (a prefix hit that left one token too), a chunked one, a preempted recompute."""
    return not seq.is_decoding


def seats(seq: Sequence, max_num_seqs: int) -> int:
    """Running-set places a sequence takes at admission (toward `max_num_seqs`): a
    request's first sample forks its `n - 1` siblings at its first token, so it takes `n`
    (as vLLM counts a sequence group), capped so that such a request can still run."""
    request = seq.request
    if request.n > 1 and seq.sample_index == 0 and len(seq.token_ids) == request.prompt_len:
        return min(request.n, max_num_seqs)
    return 1


class BatchingPolicy(ABC):
    """Decides each step's work; owns both queues. `running` is in admission order (oldest
    first); `waiting` is ordered by `queue_order` (default: first come, first served).

    A sequence whose KV is loading from a host tier (`CacheStrategy.host_tier`'s `loading`)
    holds its memory and a seat but is never scheduled, its share of the budget going to
    others (vLLM's scheduler skips `WAITING_FOR_REMOTE_KVS` requests itself): every policy
    skips it (`_waits_for_kv`), the engine schedules what the policy gives.

    Preemption (vLLM's recompute) happens only when a growing strategy cannot give a
    running sequence the memory for its next tokens: the most recently admitted sequences
    that have not been scheduled in this step are preempted first, and the sequence itself
    last. A preempted sequence gives back all its memory, goes to the front of the queue and
    later recomputes its prompt and generated tokens in one prefill; under
    `preemption_mode="swap"` its computed KV goes to the strategy's host tier instead
    (`CacheStrategy.swap_out`) and comes back at its re-admission, where the tier can hold it.
    """

    name = "?"
    # Whether `on_finished` gives a sequence's memory back (the strategy reads its tokens
    # no more); false for a policy that keeps finished members' memory (static batching).
    frees_at_finish = True
    # Whether the policy models vLLM's async scheduling (`Engine`, `async_scheduling`):
    # it leaves a running sequence whose last token is in flight unscheduled.
    models_async_scheduling = False

    def __init__(self, cache: CacheStrategy, limits: SchedulerLimits,
                 queue_order: QueueOrder | None = None) -> None:
        self.cache = cache
        self.limits = limits
        self.running: list[Sequence] = []  # in admission order
        self.waiting = WaitingQueue(queue_order)
        # Whether any request with n > 1 was added (`add`: its samples, requeued or forked,
        # come from it): until then `occupied_seats` is the running count, without a walk.
        self._multi_sample = False

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self._multi_sample = self._multi_sample or seq.request.n > 1
        self.waiting.push(seq)

    def requeue(self, seq: Sequence) -> None:
        """A sequence that could not run goes back to the front of the queue."""
        seq.status = SequenceStatus.WAITING
        self.waiting.push_front(seq)

    @abstractmethod
    def schedule(self, now_s: float) -> ScheduleOutput:
        """Pick this step's work; admits from and preempts to `self.waiting`."""

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

    def release_finished(self) -> None:
        """Give back memory that finished sequences still hold (none: freed at finish)."""
        return None

    def occupied_seats(self) -> int:
        """Places of `max_num_seqs` the running set takes (unforked parents count `n`)."""
        if not self._multi_sample:
            return len(self.running)
        max_num_seqs = self.limits.max_num_seqs
        # One place each, plus the extra places of parents of n > 1 (a filter, not a call per
        # sequence: this runs every step over the whole running set).
        running = self.running
        return len(running) + sum(
            seats(s, max_num_seqs) - 1 for s in running if s.request.n > 1)

    def _head_admissible(self) -> bool:
        """Whether `_admit_from_queue` would admit the queue head now (places and cache)."""
        head = self.waiting.head()
        if head is None:
            return False
        max_num_seqs = self.limits.max_num_seqs
        if self.occupied_seats() + seats(head, max_num_seqs) > max_num_seqs:
            return False
        return self.cache.can_admit(head, len(self.running))

    # Shared mechanics -------------------------------------------------------------------

    def _waits_for_kv(self) -> dict | None:
        """The sequences waiting for their KV to load from a host tier (by seq_id), not to be
        scheduled until it has; None (or empty) when none wait."""
        host = self.cache.host_tier
        return host.loading if host is not None else None

    def _admit(self, seq: Sequence, now_s: float, max_new_tokens: int | None = None) -> int:
        """Admit `seq` with memory for its first `max_new_tokens` uncomputed tokens (None:
        all of them); returns the tokens it computes now (its prefix hits marked computed)."""
        cache = self.cache
        cached = (cache.admit(seq, max_new_tokens)
                  if max_new_tokens is not None and cache.admits_chunks else cache.admit(seq))
        seq.num_computed += cached
        if seq.admitted_s is None:
            seq.admitted_s = now_s
            seq.cached_prompt_tokens = cached
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        loading = self._waits_for_kv()
        if loading and seq.seq_id in loading:
            return 0  # it waits for its KV from the host tier: no tokens this step
        n = seq.num_uncomputed
        if max_new_tokens is not None and n > max_new_tokens:
            n = max_new_tokens
        return cache.prefill_chunk(seq, n, self.limits.max_num_batched_tokens)

    def _admit_whole_prompts(self, now_s: float, out: ScheduleOutput) -> None:
        """Admit from the queue head, each with all its uncomputed tokens, until the next
        prompt would exceed the token budget (the first always goes: without chunked prefill
        the builder keeps the budget at least `max_model_len`)."""
        budget = self.limits.max_num_batched_tokens - out.num_tokens

        def prompt_fits(seq: Sequence) -> bool:
            return seq.num_uncomputed <= budget or not out.scheduled

        for seq, n in self._admit_from_queue(now_s, out, prompt_fits):
            out.scheduled.append((seq, n))
            budget -= n

    def _admit_chunks(self, now_s: float, out: ScheduleOutput, budget: int) -> None:
        """Admit from the queue head while `budget` tokens are left, each with as many of its
        uncomputed tokens as fit (a prompt cut into chunks), memory taken for those only
        (vLLM's `allocate_slots`; `can_admit` checked that the whole sequence fits)."""

        def budget_left(_: Sequence) -> bool:
            return budget > 0

        def chunk() -> int:
            return budget

        for seq, n in self._admit_from_queue(now_s, out, budget_left, chunk):
            out.scheduled.append((seq, n))
            budget -= n

    def _admit_from_queue(
        self,
        now_s: float,
        out: ScheduleOutput,
        may_admit: Callable[[Sequence], bool] = lambda seq: True,
        chunk: Callable[[], int] | None = None,
    ) -> Iterator[tuple[Sequence, int]]:
        """Admit from the queue head, in queue order, yielding each with the tokens it
        computes now: at most `chunk()` (asked at each admission), all without `chunk`. Stops
        at the first sequence that would exceed `max_num_seqs` places, that `may_admit`
        refuses (asked after the caller's work on each yield) or that the cache cannot take:
        no overtaking. One admitted to wait for its KV from a host tier is admitted (in
        `out.admitted`) but not yielded: it computes nothing now."""
        waiting = self.waiting
        if not waiting:
            return
        occupied = self.occupied_seats()
        max_num_seqs = self.limits.max_num_seqs
        while waiting:
            seq = waiting.head()
            places = seats(seq, max_num_seqs)
            if occupied + places > max_num_seqs:  # checked every step: kept inline
                return
            if not may_admit(seq) or not self.cache.can_admit(seq, len(self.running)):
                return
            first = None
            if chunk is not None:
                # The chunk after its prefix hits, as the cache cuts it (a hybrid's, to a
                # block boundary); none left: it waits, and so does the queue behind it
                # (vLLM's `break`), holding nothing.
                first = self.cache.admission_chunk(seq, chunk(),
                                                   self.limits.max_num_batched_tokens)
                if not first:
                    return
            waiting.pop()
            occupied += places
            n = self._admit(seq, now_s, first)
            out.admitted.append(seq)
            if n:  # (0: it waits for its KV from a host tier)
                yield seq, n

    def _schedule_decodes(self, seqs: list[Sequence], out: ScheduleOutput) -> None:
        """Every sequence of `seqs` (admission order) computes its next token within the
        budget, memory allocated oldest first (`_grow_or_preempt`)."""
        budget = self.limits.max_num_batched_tokens - out.num_tokens
        pending = deque(seqs)
        loading = self._waits_for_kv()
        while pending and budget > 0:
            seq = pending.popleft()
            if loading and seq.seq_id in loading:
                continue
            n = self.cache.prefill_chunk(seq, seq.num_uncomputed,
                                         self.limits.max_num_batched_tokens)
            if n > budget:
                break
            if self._grow_or_preempt(seq, n, pending, out):
                out.scheduled.append((seq, n))
                budget -= n

    def preempt(self, seq: Sequence, out: ScheduleOutput) -> None:
        """vLLM's recompute: drop the KV, requeue at the front, prefill everything again later.
        Swap: the strategy keeps the KV in its host tier for the re-admission to load (not a
        sequence whose last token is sampled: async scheduling's, it never runs again)."""
        self.running.remove(seq)
        if not (self.limits.preemption_mode == "swap" and len(seq.token_ids) < seq.end_len
                and self.cache.swap_out(seq)):
            self.cache.free(seq)
        seq.num_computed = 0
        seq.preemptions += 1
        self.requeue(seq)
        out.preempted.append(seq)

    def _grow_or_preempt(
        self, seq: Sequence, num_tokens: int, candidates: deque[Sequence] | list[Sequence],
        out: ScheduleOutput,
    ) -> bool:
        """Allocate for `seq`, preempting the last of `candidates` (those not yet scheduled
        this step, in admission order) until it fits; False when `seq` itself went."""
        while not self.cache.allocate(seq, num_tokens):
            victim = candidates.pop() if candidates else seq
            self.preempt(victim, out)
            if victim is seq:
                return False
        return True
