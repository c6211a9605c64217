"""`Engine`: one iteration at a time — schedule, lay out, execute, sample, commit, free."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING

from kvbench.core.clock import RunClock
from kvbench.core.request import Request
from kvbench.core.sampling_params import SampleKey, SamplingParams
from kvbench.core.sequence import Sequence, SequenceStatus, TokenCount
from kvbench.core.step_batch import StepBatch
from kvbench.engine.base_engine import BaseEngine
from kvbench.engine.decode_cohort import DecodeCohort
from kvbench.engine.group_memory import GroupMemory
from kvbench.engine.step_recorder import StepRecorder
from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput
from kvbench.strategies.base import CacheStrategy, MemorySplit, declares
from kvbench.tracing import NO_RANGE, trace_range, tracing_active

if TYPE_CHECKING:  # the executor owns torch: the core never imports it
    from kvbench.core.executor import Executor


def check_request_lengths(request: Request, max_model_len: int) -> None:
    """A request any engine must refuse: empty, or longer than the model's maximum length."""
    if request.prompt_len < 1 or request.output_len < 1:
        raise KvbenchInputError(f"request {request.request_id}: empty prompt or output")
    if request.prompt_len + request.output_len > max_model_len:
        raise KvbenchInputError(
            f"request {request.request_id}: prompt ({request.prompt_len}) + output "
            f"({request.output_len}) tokens exceed the maximum model length {max_model_len}"
        )


class RequestCheck:
    """Refuses a request that could never run: one that `check_request_lengths` refuses, or
    whose slots (`CacheStrategy.required_slots`) exceed the strategy's arena. A session
    checks its workload with one over the planned strategy before any engine is built."""

    def __init__(self, strategy: CacheStrategy, bytes_per_slot: int, max_model_len: int) -> None:
        self.strategy = strategy
        self.bytes_per_slot = bytes_per_slot
        self.max_model_len = max_model_len
        self._required_slots: dict[tuple[int, int], int] = {}  # (prompt, output) -> slots

    def __call__(self, request: Request) -> None:
        check_request_lengths(request, self.max_model_len)
        # A function of the lengths alone (`CacheStrategy.required_slots`): a long trace
        # repeats them, and a probe sequence each costs a million-request check a second.
        lengths = (request.prompt_len, request.output_len)
        need = self._required_slots.get(lengths)
        strategy = self.strategy
        if need is None:
            need = strategy.required_slots(
                Sequence(-1, request, 0, TokenCount(request.prompt_len)))
            if len(self._required_slots) < 1 << 20:
                self._required_slots[lengths] = need
        if need > strategy.capacity_slots:
            need_bytes = need * self.bytes_per_slot
            have_bytes = strategy.capacity_slots * self.bytes_per_slot
            raise KvbenchInputError(
                f"--kv-memory too small: request {request.request_id} needs {need} KV slots "
                f"({need_bytes / 2**20:.2f} MiB) under {strategy.name}, the arena holds "
                f"{strategy.capacity_slots} ({have_bytes / 2**20:.2f} MiB); "
                f"use --kv-memory {max(1, -(-need_bytes // 2**20))}MiB or more"
            )


def _split_prefills(
    scheduled: list[tuple[Sequence, int]],
) -> tuple[list[tuple[Sequence, int]], list[tuple[Sequence, int]]]:
    """Prefills and decodes. A decode computes the one token sampled last step; anything
    else (prompts, prompt chunks, recomputation after preemption) is a prefill. One pass
    with the checks inlined: this runs for every sequence of every step."""
    prefills: list[tuple[Sequence, int]] = []
    decodes: list[tuple[Sequence, int]] = []
    add_decode = decodes.append
    for item in scheduled:
        seq, n = item
        length = len(seq.token_ids)
        if n == 1 and seq.num_computed == length - 1 and length > seq.prompt_len:
            add_decode(item)
        else:
            prefills.append(item)
    return prefills, decodes


class Engine(BaseEngine):
    """Drives a `BatchingPolicy`, a `CacheStrategy` and an `Executor` over added requests.

    `clock()` returns seconds on the run's clock (wall time by default).
    """

    policy: BatchingPolicy
    strategy: CacheStrategy

    def __init__(
        self,
        strategy: CacheStrategy,
        policy: BatchingPolicy,
        executor: Executor,
        *,
        bytes_per_slot: int,
        max_model_len: int,
        temperature: float = 0.0,
        seed: int = 0,
        clock: RunClock | None = None,
        memory_probe: Callable[[], dict] | None = None,
        group_memory: GroupMemory | None = None,
    ) -> None:
        super().__init__(max_model_len=max_model_len, temperature=temperature, seed=seed,
                         clock=clock)
        self.strategy = strategy
        self.policy = policy
        self.executor = executor
        self.drawn_trace_ranges = executor.drawn_trace_ranges
        self.bytes_per_slot = bytes_per_slot
        self.step_recorder = StepRecorder(self.steps, bytes_per_slot=bytes_per_slot,
                                          memory_probe=memory_probe, group_memory=group_memory)
        self._traced = False  # whether this step records trace ranges (set at its start)
        # Whether every running sequence is decoding, so that a decode run may follow
        # (`fast_forward`): True after a step that decoded them all and did nothing else,
        # None (not known: looked at once) after any other step, False when the next step
        # is known to be no run's.
        self._decoded_all: bool | None = False
        self._memory_probe = memory_probe
        # False where the caller reads only how many tokens a finished sequence has (the
        # simulate session: its executor reads no ids), so that a finished sequence whose
        # memory is back lets its ids go (`TokenCount`) instead of holding them to the end.
        self.keep_finished_token_ids = True
        self.holds_token_ids = (executor.reads_token_inputs
                                or not declares(strategy, "reads_no_token_ids"))
        strategy.keeps_table_log = executor.reads_kv_tables
        # The running sequences of a decode run, advanced by counting (`fast_forward`), and
        # the prompts admitted while it kept its members, which join at the next run.
        self._cohort = DecodeCohort(self.step_times, executor.decode_run_token)
        self._check_request = RequestCheck(strategy, bytes_per_slot, max_model_len)
        self._joiners: list[Sequence] = []

    # Requests ---------------------------------------------------------------------------

    def check_request(self, request: Request) -> None:
        """Raise `KvbenchInputError` for a request that could never run on this engine."""
        self._check_request(request)

    def add_request(self, request: Request, checked: bool = False) -> None:
        if not checked:
            self.check_request(request)
        seq = self._new_sequence(request, 0)
        self.sequences[request.request_id] = [seq]
        self.policy.add(seq)
        self._unfinished += request.n

    # One iteration ----------------------------------------------------------------------

    def step(self) -> list[Sequence]:
        """Run one iteration; returns the sequences that finished in it."""
        t_start = self.clock()
        cohort = self._cohort
        if cohort.members and not self.policy.next_schedule_admits_only():
            self._dissolve_cohort()  # the schedule reads the running sequences: make them current
        # Checked once a step: with nobody recording, the ranges and their arguments would
        # cost a long simulation a tenth of a second per 100k steps for nothing.
        traced = self._traced = tracing_active()
        with trace_range("step", step=self.step_recorder.num_steps) if traced else NO_RANGE:
            out = self._schedule(t_start)
            if not out.scheduled:
                self._decoded_all = None
                return self._schedule_nothing(len(out.preempted))
            batch, to_sample, forks = self._build_batch(out.scheduled)
            self._decoded_all = (not batch.num_prefill_seqs and not out.admitted
                                 and not out.preempted
                                 and len(out.scheduled) == len(self.policy.running)) or None
            tokens, forward_s, now_s = self._execute(batch, to_sample, forks)
            finished = self._commit(to_sample, tokens, now_s, bool(forks))
            if cohort.members:  # the prompts this step admitted join at the next run
                self._joiners += out.admitted
            split = self._memory_split()
        self.step_recorder.record(t_start, self.clock(), forward_s, batch, split,
                                  len(out.preempted), self.num_running, len(self.waiting), traced)
        return finished

    def settle(self) -> None:
        """Bring every running sequence's counts and token times up to date (the decode
        cohort's members are advanced by counting): before anything reads them from outside
        the engine, e.g. the results of a run that stopped."""
        self._dissolve_cohort()

    # Fast-forward ------------------------------------------------------------------------

    def fast_forward(self, until_s: float = math.inf,
                     through_finishes: bool = False) -> tuple[int, list[Sequence]]:
        """Run the decode steps that come next in one move, as many as stay a decode run:
        every running sequence decodes one token a step and nothing else can happen, up to
        and including the step in which the first sequence finishes (its finish is that
        step's, as in `step`), or up to the step before one in which an allocation would
        fail, and no step starting at or after `until_s` (the caller's next arrival).
        `through_finishes`: go on after a step in which sequences finished, while the rest
        still make a decode run (a caller whose next arrival no finish can bring forward). A
        step that only admits prompts from the queue (`next_schedule_admits_only`) is run
        here too, through `step`, and the run goes on with its prompts.
        Returns how many steps ran (0: the next step is not one of a run; `step` runs it)
        and the sequences that finished in them, in order.

        The state after is the state after that many `step` calls, and so are the step rows
        and token times (docs/simulator.md, Fast-forward): only a policy, strategy and
        executor that declare decode runs take part, and never while a trace is recorded.
        The running sequences decode as the members of a `DecodeCohort`: a run costs the
        blocks it takes and the sequences that finish, not a pass over every member."""
        if self._decoded_all is False:
            return 0, []
        policy, strategy, executor = self.policy, self.strategy, self.executor
        running = policy.running
        if (not running or not executor.advances_decode_runs or self._memory_probe is not None
                or not declares(policy, "fast_forward_decodes")
                or not declares(strategy, "fast_forward_decodes")):
            return 0, []
        if not self._join_cohort(running):
            self._decoded_all = False
            return 0, []
        cohort = self._cohort
        total = 0
        finished: list[Sequence] = []
        while True:
            if strategy.has_pending_copies() or tracing_active():
                return total, finished
            if not policy.decode_run_ready():
                # A step of prompts alone keeps the members: it runs here, and its prompts
                # join the run after it (prefill-first admitting an arrival).
                if not policy.next_schedule_admits_only() or self.clock() >= until_s:
                    return total, finished
                now_finished = self._prompt_step()
                finished += now_finished
                total += 1
                if ((now_finished and not through_finishes) or self.clock() >= until_s
                        or not self._join_cohort(running)):
                    return total, finished
                continue
            # The step in which the first member samples its last token: the run's last.
            to_finish = cohort.steps_to_first_finish()
            fit = strategy.cohort_run_steps(cohort.ordinal, len(cohort), to_finish)
            run = min(fit, to_finish - 1)
            num_steps = self._decode_run(run, until_s) if run > 0 else 0
            total += num_steps
            if num_steps < run or (num_steps and self.clock() >= until_s):
                return total, finished  # the next arrival comes first
            victims: list[Sequence] = []
            if fit < to_finish:  # the pool runs dry in the next step: some members go
                victims = strategy.cohort_step_victims(cohort.ordinal,
                                                       policy.preemption_candidates())
                if victims is None:  # all of them: `step`'s (it admits in the same step)
                    self._decoded_all = False
                    return total, finished
            now_finished = self._cohort_step(victims)
            finished += now_finished
            total += 1
            if ((now_finished and not through_finishes) or not running
                    or self.clock() >= until_s):
                return total, finished

    def _prompt_step(self) -> list[Sequence]:
        """`step` for a schedule of whole prompts alone (`next_schedule_admits_only`: the
        decode cohort keeps its members) under an executor that advances decode runs (it
        reads a step's lengths, nothing else): the same books, clock, tokens and row,
        without the batch, layout and sampling objects a computing executor needs."""
        self._traced = False  # (never while a trace is recorded: `fast_forward`)
        t_start = self.clock()
        out = self.policy.schedule(t_start)
        scheduled = out.scheduled
        if not scheduled or out.preempted:
            raise AssertionError("a step of prompts alone scheduled something else")
        query_lens: list[int] = []
        seq_lens: list[int] = []
        to_sample: list[Sequence] = []
        num_tokens = 0
        for seq, n in scheduled:  # `_build_batch`'s loop for prefills
            computed = seq.num_computed + n
            seq.num_computed = computed
            query_lens.append(n)
            seq_lens.append(computed)
            num_tokens += n
            if computed == len(seq.token_ids):
                to_sample.append(seq)
        self.prefill_tokens_computed += num_tokens
        t_end = self.executor.advance_step(query_lens, seq_lens, len(to_sample))
        token = [self.executor.decode_run_token]
        finished = self._commit(to_sample, [token] * len(to_sample), t_end, False)
        self._joiners += out.admitted
        self._decoded_all = None
        self.step_recorder.record_step(t_start, t_end, len(scheduled), 0, num_tokens,
                                       self._memory_split(), self.num_running,
                                       len(self.waiting))
        return finished

    def _join_cohort(self, running: list[Sequence]) -> bool:
        """Make every running sequence a member of the decode cohort (those that are not
        yet: all of them after a step that read them, else the prompts admitted since);
        False, leaving the cohort as it is, when one of them is not decoding."""
        cohort = self._cohort
        if len(cohort) == len(running):  # (members only leave by finishing, which `_finish` sees)
            self._joiners = []
            return True
        joiners = running if not cohort.members else self._joiners
        fresh = [seq for seq in joiners
                 if seq.decode_from < 0 and seq.status is SequenceStatus.RUNNING]
        # `Sequence.is_decoding` of each, inlined
        if not all([0 < seq.num_computed == len(seq.token_ids) - 1
                    and len(seq.token_ids) > seq.prompt_len for seq in fresh]):
            return False
        if len(cohort) + len(fresh) != len(running):
            raise AssertionError("decode cohort: a running sequence neither member nor joiner")
        join, ordinal = self.strategy.join_decode_cohort, cohort.ordinal
        for seq in fresh:
            join(seq, ordinal, cohort.join(seq))
        self._joiners = []
        return True

    def _dissolve_cohort(self) -> None:
        """Every member's counts made current and the cohort emptied (the strategy's too)."""
        if self._cohort.members:
            self._cohort.dissolve()
            self.strategy.clear_decode_cohort()
        self._joiners = []

    def _cohort_tokens(self, holders: list[Sequence]) -> int:
        """The `num_computed` of `holders`, summed: the members' as the cohort counts them."""
        cohort = self._cohort
        if holders is self.policy.running:
            if len(cohort) == len(holders):
                return cohort.computed_tokens
            # the running sequences outside the cohort: those admitted since it last grew
            running = SequenceStatus.RUNNING
            return cohort.computed_tokens + sum([
                seq.num_computed for seq in self._joiners
                if seq.decode_from < 0 and seq.status is running])
        return cohort.computed_tokens + sum([seq.num_computed for seq in holders
                                             if seq.decode_from < 0])

    def _memory_split(self) -> MemorySplit:
        """The strategy's split of the holders' memory, with the queue head."""
        holders, head = self.policy.holders(), self.waiting.head()
        if not self._cohort.members:
            return self.strategy.memory_split(holders, head)
        tokens = self._cohort_tokens(holders)
        if self.strategy.check_accounting:  # the members' own counts, brought up to date
            self._cohort.settle_all()
            if tokens != sum(seq.num_computed for seq in holders):
                raise AssertionError(f"decode cohort: {tokens} computed tokens counted, "
                                     f"{sum(seq.num_computed for seq in holders)} held")
        return self.strategy.memory_split(holders, head, tokens)

    def _decode_run(self, max_steps: int, until_s: float) -> int:
        """`max_steps` decode steps of the running set (their memory fits, nobody finishes
        in them), fewer when one would start at or after `until_s`; how many ran."""
        policy, strategy, executor, cohort = self.policy, self.strategy, self.executor, self._cohort
        num_seqs = len(cohort)
        t_start = self.clock()
        computed = cohort.computed_tokens
        ends = executor.advance_decode_run(num_seqs, computed + num_seqs, max_steps, until_s)
        num_steps = len(ends)
        totals_before = strategy.books_totals()
        books = strategy.grow_cohort_run(cohort.ordinal, num_steps)
        holders = policy.holders()
        token_slots = self._cohort_tokens(holders)
        head = self.waiting.head()
        self.step_recorder.record_decode_run(
            t_start, ends, num_seqs, len(self.waiting), token_slots, books, totals_before,
            strategy.decode_run_split_parts(head), strategy.num_slots,
        )
        step_ends = self.step_times.ends
        first = len(step_ends)
        step_ends.extend(ends)
        cohort.advance(first, num_steps)
        if strategy.check_accounting:  # the last row against the books, recomputed
            self._check_decode_run_books(holders, head)
        return num_steps

    def _cohort_step(self, victims: list[Sequence]) -> list[Sequence]:
        """`step`'s work for a step whose schedule is every running sequence's one token, its
        memory known to fit once `victims` are preempted (in that order, as the scheduler
        takes them): the step in which a run's first members sample their last token, or
        one in which the pool runs dry. Returns the sequences that finished."""
        policy, strategy, executor, cohort = self.policy, self.strategy, self.executor, self._cohort
        t_start = self.clock()
        if victims:
            out = ScheduleOutput()
            for seq in victims:
                cohort.leave(seq)
                policy.preempt(seq, out)  # its memory back, requeued at the front
        num_seqs = len(cohort)
        context = cohort.computed_tokens + num_seqs
        (t_end,) = executor.advance_decode_run(num_seqs, context, 1, math.inf)
        # The schedule's own allocation call (`_schedule_decodes`): it fits now.
        strategy.grow_cohort_run(cohort.ordinal, 1)
        cohort.advance(self.step_times.add(t_end), 1)
        finished = cohort.pop_finished()
        leave = strategy.leave_decode_cohort
        for seq in finished:
            leave(seq)
            self._finish(seq, t_end)
        # The row from the books after the finishes, as a run's rows are made.
        holders, head = policy.holders(), self.waiting.head()
        recorder = self.step_recorder
        recorder.skip(len(victims))  # (the row's preemptions)
        recorder.record_decode_run(
            t_start, [t_end], num_seqs, len(self.waiting),
            self._cohort_tokens(holders) - num_seqs, [], strategy.books_totals(),
            strategy.decode_run_split_parts(head), strategy.num_slots, self.num_running)
        if strategy.check_accounting:
            self._check_decode_run_books(holders, head)
        self._decoded_all = True  # as `step` leaves it: the others decoded, nothing else
        return finished

    def _check_decode_run_books(self, holders: list[Sequence], head: Sequence | None) -> None:
        self._cohort.settle_all()
        split = self.strategy.memory_split(holders, head)
        last = self.step_recorder.last
        b = self.bytes_per_slot
        got = (last.kv_token_bytes, last.kv_reserved_bytes, last.kv_internal_bytes,
               last.kv_external_bytes, last.kv_free_bytes, last.kv_cached_bytes,
               last.kv_prompt_blocks)
        expected = (split.token * b, split.reserved * b, split.internal * b,
                    split.external * b, split.free * b, split.cached * b, split.prompt_blocks)
        if got != expected:
            raise AssertionError(f"{self.strategy.name}: a decode run's last row {got} "
                                 f"differs from the books {expected}")

    def _schedule(self, now_s: float) -> ScheduleOutput:
        with (trace_range("schedule", waiting=len(self.waiting), running=self.num_running)
              if self._traced else NO_RANGE):
            return self.policy.schedule(now_s)

    def _schedule_nothing(self, num_preempted: int) -> list[Sequence]:
        """A step with nothing to run: no row (the preemptions go in the next), no
        finished sequences; raises when the queue head can never be admitted."""
        self.step_recorder.skip(num_preempted)
        if self.waiting and not self.policy.has_work():
            raise KvbenchRunError(
                f"scheduler stalled: request {self.waiting.head().request.request_id} "
                "cannot be admitted into an empty cache"
            )
        return []

    def _build_batch(
        self, scheduled: list[tuple[Sequence, int]]
    ) -> tuple[StepBatch, list[Sequence], dict[int, tuple[SampleKey, ...]]]:
        """The step's batch (prefills first), the sequences that sample (row order) and the
        sampling keys of the forking rows; counts the step's tokens as computed. Token ids
        and positions only for an executor that reads them. One pass over the sequences:
        the engine's hot loop."""
        prefills, decodes = _split_prefills(scheduled)
        ordered = prefills + decodes if prefills else decodes
        with trace_range("layout", seqs=len(ordered)) if self._traced else NO_RANGE:
            layout = self.strategy.build_layout(ordered)
        reads_inputs = self.executor.reads_token_inputs
        if not prefills:  # the common step: one token each, every row samples, none forks
            to_sample = [seq for seq, _ in decodes]
            if reads_inputs:
                input_ids = [seq.token_ids[-1] for seq in to_sample]
                positions = [seq.num_computed for seq in to_sample]
            else:
                input_ids, positions = [], []
            for seq in to_sample:
                seq.num_computed += 1
            return (StepBatch(input_ids, positions, layout, 0, list(range(len(to_sample))),
                              num_tokens=len(to_sample)), to_sample, {})
        sample_rows: list[int] = []
        to_sample = []
        forks: dict[int, tuple[SampleKey, ...]] = {}
        input_ids, positions = [], []
        num_tokens = 0
        for seq, n in ordered:
            start = seq.num_computed
            tokens = seq.token_ids
            if reads_inputs:
                input_ids.extend(tokens[start : start + n])
                positions.extend(range(start, start + n))
            num_tokens += n
            seq.num_computed = start + n
            if start + n == len(tokens):
                sample_rows.append(num_tokens - 1)
                # first_token_s is set after the first token: the fork test rarely goes on.
                if seq.first_token_s is None and seq.sample_index == 0 and seq.request.n > 1:
                    forks[len(to_sample)] = self._fork_keys(seq)
                to_sample.append(seq)
        self.prefill_tokens_computed += num_tokens - len(decodes)
        batch = StepBatch(input_ids, positions, layout, len(prefills), sample_rows,
                          num_tokens=num_tokens)
        return batch, to_sample, forks

    def _execute(
        self, batch: StepBatch, to_sample: list[Sequence],
        forks: dict[int, tuple[SampleKey, ...]],
    ) -> tuple[list[list[int]], float, float]:
        """Each sampling row's tokens, the seconds the forward took, and the clock after it."""
        sampling = SamplingParams(self.temperature, self.seed, rows=to_sample, forks=forks)
        t_forward = self.clock()
        tokens = self.executor.execute_and_sample(batch, sampling)
        t_forward_end = self.clock()
        return tokens, t_forward_end - t_forward, t_forward_end

    @staticmethod
    def _fork_keys(seq: Sequence) -> tuple[SampleKey, ...]:
        """A forking parent's keys (its request's first token, with `n > 1`): its own, then,
        from the same logits, one per sibling (seeded by the sibling's key, at the prompt's
        end)."""
        request = seq.request
        own = (request.request_id, seq.sample_index, len(seq.token_ids))
        return (own, *((request.request_id, i, request.prompt_len) for i in range(1, request.n)))

    def _commit(
        self, to_sample: list[Sequence], tokens: list[list[int]], now_s: float,
        forking: bool = True,
    ) -> list[Sequence]:
        """Append each row's token; `forking`: some row also carries its siblings' tokens."""
        with trace_range("sample", rows=len(to_sample)) if self._traced else NO_RANGE:
            step = self.step_times.add(now_s)
            finished = self._append_tokens(to_sample, map(itemgetter(0), tokens), now_s, step)
            if forking:
                for seq, row_tokens in zip(to_sample, tokens, strict=True):
                    if len(row_tokens) > 1:  # a forking parent's siblings' tokens
                        self._fork_children(seq, row_tokens[1:], now_s, step)
            for seq in finished:
                self._finish(seq, now_s)
        return finished

    @staticmethod
    def _append_tokens(
        seqs: list[Sequence], tokens: Iterable[int], now_s: float, step: int
    ) -> list[Sequence]:
        """Append each sequence's next token, sampled at `now_s`, the end of `step` (its
        index in `step_times`); returns the sequences that produced their last one. One loop
        with `Sequence.is_finished` and `add_step_range` inlined: this runs for every
        sampled token."""
        finished: list[Sequence] = []
        stop = step + 1
        for seq, token in zip(seqs, tokens, strict=True):
            token_ids = seq.token_ids
            token_ids.append(token)
            steps = seq.token_steps
            if steps and steps[-1] == step:
                steps[-1] = stop
            else:
                steps += (step, stop)
            if seq.first_token_s is None:
                seq.first_token_s = now_s
            if len(token_ids) >= seq.end_len:
                finished.append(seq)
        return finished

    def _fork_children(self, parent: Sequence, tokens: list[int], now_s: float,
                       step: int) -> None:
        """Parallel sampling: children take the parent's prompt KV; `tokens[i]` is the first
        token of sample `i + 1`, drawn from the parent's logits by its own key."""
        request = parent.request
        group = self.sequences[request.request_id]
        for sample_index in range(1, request.n):
            child = self._new_sequence(request, sample_index)
            group.append(child)
            child.admitted_s = parent.admitted_s
            if self.strategy.fork(parent, child) is None:
                self.policy.requeue(child)  # no room to share or copy: prefill on its own
                continue
            child.num_computed = parent.prompt_len
            child.cached_prompt_tokens = parent.prompt_len
            self.policy.add_running(child)
            if self._cohort.members:
                self._joiners.append(child)
            # finished at once (a one-token output): its memory is back before the next fork
            if self._append_tokens([child], [tokens[sample_index - 1]], now_s, step):
                self._finish(child, now_s)

    def _finish(self, seq: Sequence, now_s: float) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_s = now_s
        self.policy.on_finished(seq)
        self._unfinished -= 1
        if (not self.keep_finished_token_ids and self.holds_token_ids
                and self.policy.frees_at_finish):
            seq.token_ids = TokenCount(len(seq.token_ids))

    def drain(self) -> None:
        """Give back memory still held by finished members (static batching's last batch)."""
        self.policy.release_finished()

    def reset_stats(self) -> None:
        super().reset_stats()
        self.strategy.reset_stats()
        self._decoded_all = False
        self._dissolve_cohort()
