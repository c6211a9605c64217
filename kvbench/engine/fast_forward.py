"""Fast-forward: runs of decode-only steps taken in one move, with the results of stepping.

Between the events that can change a schedule, a step is a pure function of the one before
it. `FastForward.run` (`Engine.fast_forward`, called by the runner before each step) takes
such a stretch at once, ending it before the first step that could go differently, and
takes the step in which the first sequences finish or the pool runs dry too. The running
sequences decode as a `DecodeCohort`, advanced by counting, and the run's `steps.csv` rows go
to the step recorder as a description (`DecodeRunRows`); state, rows and token times are
those of stepping (docs/simulator.md, Fast-forward; tests/simulator/test_fast_forward.py).

The protocol. An engine fast-forwards only where its batching policy, cache strategy and
executor each take part (`takes_part`): the object's own class sets `decode_runs = True` in
its body (not inherited: `prefix` is `paged`, but a decode may fill a block that must be
hashed) and the object has not turned it off (the simulated executor of a windowed model).
Each must then offer `RunPolicy`, `RunStrategy` or `RunExecutor` below; nothing else in the
engine, policies, strategies or executors knows about runs, and a part that does not declare
them runs by stepping, with the same results.

A mixed step (`RunPolicy.decodes_first_budget`: `vllm-v1`, whose schedule gives every
running sequence its token and then admits prompts in the budget left) keeps the cohort too:
its members decode as one cohort step, their memory taken first as the schedule's running pass
takes it, and only the prompts admitted (`RunPolicy.admit_in_budget`) are stepped; the step's
batch lists the prompts alone and the executor costs the members by their number and
lengths' sum (`RunExecutor.execute_mixed_step`); the prompts join at the next run.

Under async scheduling (`Engine.async_scheduling`) a decode run is the same as synchronously
until its last step: the members that sample their last token there are left running, holding
their memory and seat, outside the cohort, and end after the next step is scheduled. A run
goes on (or starts) with them held where that next step is a decode step whose memory fits:
through finishes, the first step of the run that goes on, which ends them first (the memory
they give back is not what its allocation takes: `RunStrategy`); else a run's last step of its
own, which ends them after its allocation (`Engine.see_ending`) as `Engine.step` does. A mixed
step that follows them ends them after its schedule, as `Engine.step` does; any other step
that follows them is `Engine.step`'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from kvbench.core.decode_run_rows import BooksAfterStep
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.sequence import Sequence, SequenceStatus
from kvbench.engine.decode_cohort import DecodeCohort
from kvbench.scheduling.base import ScheduleOutput
from kvbench.strategies.base import MemorySplit, declares
from kvbench.tracing import tracing_active

if TYPE_CHECKING:
    from kvbench.core.step_batch import StepBatch
    from kvbench.engine.engine import Engine


@runtime_checkable
class RunPolicy(Protocol):
    """What a `BatchingPolicy` offers to be fast-forwarded (besides `preempt`, which every
    policy has)."""

    def decode_run_ready(self) -> bool:
        """Whether the next `schedule` gives every running sequence (all decoding) its one
        token and nothing else, and keeps doing so while the running set and the queue do
        not change, no allocation fails and the cache's free memory only shrinks."""

    def next_schedule_admits_only(self) -> bool:
        """Whether the next `schedule` only admits prompts from the queue, reading and
        changing no running sequence (the cohort then keeps its members through the step,
        and the prompts join at the next run)."""

    def decodes_first_budget(self, num_held: int = 0) -> int | None:
        """Where the next `schedule` gives every running sequence (all decoding) but the
        `num_held` whose last token is in flight (async scheduling: not scheduled, ended
        after the schedule) its one token first, preempting none while their memory fits,
        and then only admits prompts from the queue: the token budget it admits in (a mixed
        step: the members decode as a cohort step, the prompts are stepped). None where it
        does not."""

    def admit_in_budget(self, now_s: float, budget: int) -> ScheduleOutput:
        """The admissions of such a schedule, the running sequences' tokens (and memory)
        taken: the prompts it admits, with their tokens, as `schedule` gives them."""


@runtime_checkable
class RunStrategy(Protocol):
    """What a `CacheStrategy` offers to be fast-forwarded: it follows the decode cohort's
    members itself, so that a run costs it the blocks the run takes. Members are numbered
    by admission (`rank`); cohort steps are numbered 0, 1, ... for the engine's life
    (`ordinal`). While running sequences only grow, `can_admit` must never turn from False
    to True. Memory given back (`free`) is taken by allocations only after all that was
    free before it, so that where a step's allocation fits, freeing before it takes the same
    memory (paged's first-in first-out free list). The strategy's `memory_split` takes the
    members' computed tokens, summed (their own `num_computed` is not current while they
    are members)."""

    def join_decode_cohort(self, seq: Sequence, ordinal: int, rank: int) -> None:
        """`seq`, decoding, with its `num_computed` current, decodes one token in every
        cohort step from `ordinal` on, until it leaves or the cohort is cleared."""

    def leave_decode_cohort(self, seq: Sequence) -> None:
        """`seq` decodes no more with the cohort (its `num_computed` is current again)."""

    def clear_decode_cohort(self) -> None:
        """Every member leaves."""

    def cohort_run_steps(self, ordinal: int, num_members: int, max_steps: int) -> int:
        """How many cohort steps from `ordinal` (at most `max_steps`) fit, every member
        growing one token a step, allocated in admission order step after step, before an
        allocation would fail (0: the next step is one in which the pool runs dry)."""

    def cohort_step_victims(self, ordinal: int,
                            candidates: list[Sequence]) -> list[Sequence] | None:
        """The members preempted in cohort step `ordinal`, whose blocks run out, in the
        order the scheduler preempts them (the last of `candidates`, the running sequences
        in admission order, first); None where that would preempt every candidate (the
        step is then `Engine.step`'s)."""

    def grow_cohort_run(self, ordinal: int, num_steps: int) -> list[BooksAfterStep]:
        """Take the memory of cohort steps `ordinal .. + num_steps - 1` exactly as that
        many steps' `allocate` calls would, in the same order; the running totals
        (`books_totals`) after each step that allocated, numbered from 0 in the run."""

    def decode_run_split_parts(self, head_waiting: Sequence | None) -> tuple[int, int, bool]:
        """What a run leaves fixed in every step's memory split: (external slots, cached
        slots, whether `prompt_blocks` is reported), as `memory_split` gives them."""


@runtime_checkable
class RunExecutor(Protocol):
    """What an `Executor` offers to be fast-forwarded: a run of decode steps known by their
    lengths, every sampled token `decode_run_token`."""

    decode_run_token: int

    def advance_decode_run(self, num_seqs: int, context_tokens: int, max_steps: int,
                           until_s: float) -> list[float]:
        """Run up to `max_steps` decode steps of `num_seqs` sequences holding
        `context_tokens` in all at the first (new tokens included), none after the first
        starting at or after `until_s`; each step's end on the run's clock, as that many
        steps run one at a time would leave it."""

    def execute_mixed_step(self, batch: StepBatch, sampling: SamplingParams, num_decodes: int,
                           decodes_context: int) -> list[list[int]]:
        """`execute_and_sample` of one step: `batch` (the prompts a mixed step admits) and
        `num_decodes` decode rows it does not list, holding `decodes_context` tokens in all
        (new tokens included), each sampling `decode_run_token`; the tokens of `sampling`'s
        rows (the batch's own), as `execute_and_sample` of the step with every row listed
        gives them."""


def takes_part(obj: object) -> bool:
    """Whether `obj` takes part in fast-forward: its own class sets `decode_runs = True` in
    its body (not inherited) and `obj` has not turned it off."""
    return declares(obj, "decode_runs") and bool(obj.decode_runs)


class FastForward:
    """An engine's fast-forward: the decode cohort, and the runs it takes. The engine calls
    `before_step`, `admitted` and `memory_split` from its own step, and `settle` before
    anything reads the running sequences from outside."""

    @classmethod
    def of(cls, engine: Engine) -> FastForward | None:
        """The engine's fast-forward, or None where one of its parts does not take part."""
        parts = ((engine.policy, RunPolicy), (engine.strategy, RunStrategy),
                 (engine.executor, RunExecutor))
        if not all(takes_part(part) for part, _ in parts):
            return None
        for part, protocol in parts:
            if not isinstance(part, protocol):
                raise TypeError(f"{type(part).__name__} declares decode runs but lacks some "
                                f"of {protocol.__name__}")
        return cls(engine)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.policy: RunPolicy = engine.policy
        self.strategy: RunStrategy = engine.strategy
        self.executor: RunExecutor = engine.executor
        self.cohort = DecodeCohort(engine.step_times, self.executor.decode_run_token)
        # Running sequences that are not members yet: the prompts admitted (and the children
        # forked) while the cohort kept its members; they join at the next run.
        self._joiners: list[Sequence] = []

    # The engine's step ------------------------------------------------------------------

    def before_step(self) -> None:
        """A step is about to schedule: the members are made current unless the schedule
        only admits prompts (it reads no running sequence)."""
        if self.cohort.members and not self.engine.policy.next_schedule_admits_only():
            self.settle()

    def admitted(self, seqs: list[Sequence]) -> None:
        """Sequences that started running in a step that kept the cohort's members."""
        if self.cohort.members:
            self._joiners += seqs

    def settle(self) -> None:
        """Every member's counts and token times made current; the cohort emptied."""
        if self.cohort.members:
            self.cohort.dissolve()
            self.engine.strategy.clear_decode_cohort()
        self._joiners = []

    def memory_split(self, holders: list[Sequence], head: Sequence | None) -> MemorySplit:
        """The strategy's split of the holders' memory, the members counted by the cohort."""
        strategy = self.engine.strategy
        if not self.cohort.members:
            return strategy.memory_split(holders, head)
        tokens = self._computed_tokens(holders)
        if strategy.check_accounting:  # the members' own counts, brought up to date
            self.cohort.settle_all()
            if tokens != sum(seq.num_computed for seq in holders):
                raise AssertionError(f"decode cohort: {tokens} computed tokens counted, "
                                     f"{sum(seq.num_computed for seq in holders)} held")
        return strategy.memory_split(holders, head, tokens)

    # Runs ------------------------------------------------------------------------------

    def run(self, until_s: float = math.inf,
            through_finishes: bool = False) -> tuple[int, list[Sequence]]:
        """`Engine.fast_forward`: run the decode steps that come next, as many as stay a
        decode run, up to and including the step in which the first sequences finish
        (`through_finishes`: and on, while the rest still make a run), none starting at or
        after `until_s`; a step that only admits prompts runs here too (`Engine.step`) and
        the run goes on with its prompts. How many steps ran, and the sequences that
        finished in them, in order."""
        engine, policy, strategy, cohort = self.engine, self.policy, self.strategy, self.cohort
        running = engine.policy.running
        if not running or not self._join(running):
            return 0, []
        total = 0
        finished: list[Sequence] = []
        while True:
            if engine.strategy.has_pending_copies() or tracing_active():
                return total, finished
            # Async: sequences whose last token is in flight are held until the next step
            # is scheduled; that step runs here as a run's last step, which then ends them.
            held = engine.ending_unseen()
            if not policy.decode_run_ready():
                if engine.clock() >= until_s or (held and not cohort.members):
                    return total, finished
                # A step of prompts alone keeps the members: its prompts join after it; so
                # does a mixed step, its members decoding as one cohort step (the held
                # end in it, after its schedule, as in `Engine.step`).
                if policy.next_schedule_admits_only() and not held:
                    now_finished = engine.step()
                else:
                    budget = policy.decodes_first_budget(held)
                    if (budget is None or engine.executor.reads_token_inputs
                            or strategy.cohort_run_steps(cohort.ordinal, len(cohort), 1) < 1):
                        return total, finished
                    now_finished = self._mixed_step(budget)
                finished += now_finished
                total += 1
                if ((now_finished and not through_finishes) or engine.clock() >= until_s
                        or not self._join(running)):
                    return total, finished
                continue
            if held and not cohort.members:
                return total, finished  # (a step that schedules nothing: the engine's)
            # The step in which the first member samples its last token: the run's last.
            to_finish = cohort.steps_to_first_finish()
            fit = strategy.cohort_run_steps(cohort.ordinal, len(cohort), to_finish)
            if held and (fit == 0 or engine.clock() >= until_s):
                return total, finished  # (the held give memory back only after it)
            if held and to_finish > 1 and through_finishes:
                # The held end after this step's schedule: ended first, they give back
                # memory the step's allocation does not take (`RunStrategy`), and the run
                # goes on through the step; the steps after it see their seats and memory.
                finished += engine.see_ending()
                held = 0
                fit = strategy.cohort_run_steps(cohort.ordinal, len(cohort), to_finish)
                if not policy.decode_run_ready():  # the next step admits: this one alone
                    total += self._decode_run(1, until_s)
                    if engine.clock() >= until_s:
                        return total, finished
                    continue
            run = min(fit, to_finish - 1) if not held else 0
            num_steps = self._decode_run(run, until_s) if run > 0 else 0
            total += num_steps
            if num_steps < run or (num_steps and engine.clock() >= until_s):
                return total, finished  # the next arrival comes first
            victims: list[Sequence] = []
            if fit <= run:  # the pool runs dry in the next step: some members go
                victims = strategy.cohort_step_victims(cohort.ordinal, running)
                if victims is None:  # all of them: `Engine.step`'s (it admits in the step)
                    return total, finished
            now_finished = self._last_step(victims)
            finished += now_finished
            total += 1
            if ((now_finished and not through_finishes) or not running
                    or engine.clock() >= until_s):
                return total, finished

    def _join(self, running: list[Sequence]) -> bool:
        """Make every running sequence a member (all of them after a step that read them,
        else those admitted since); False, leaving the cohort as it is, when one of them is
        not decoding."""
        cohort = self.cohort
        if len(cohort) == len(running):  # (members only leave by finishing, which is seen)
            self._joiners = []
            return True
        joiners = running if not cohort.members else self._joiners
        fresh = [seq for seq in joiners
                 if seq.decode_from < 0 and seq.status is SequenceStatus.RUNNING]
        # Async: those whose last token is in flight stay outside, held until seen.
        held = [seq for seq in fresh if len(seq.token_ids) >= seq.end_len]
        if held:
            fresh = [seq for seq in fresh if len(seq.token_ids) < seq.end_len]
        # `Sequence.is_decoding` of each, inlined
        if not all([0 < seq.num_computed == len(seq.token_ids) - 1
                    and len(seq.token_ids) > seq.prompt_len for seq in fresh]):
            return False
        if len(cohort) + len(fresh) + len(held) != len(running):
            raise AssertionError("decode cohort: a running sequence neither member nor joiner")
        join, ordinal = self.strategy.join_decode_cohort, cohort.ordinal
        for seq in fresh:
            join(seq, ordinal, cohort.join(seq))
        self._joiners = held  # running outside the cohort (`_computed_tokens`)
        return True

    def _computed_tokens(self, holders: list[Sequence]) -> int:
        """The `num_computed` of `holders`, summed: the members' as the cohort counts them."""
        cohort = self.cohort
        if holders is self.engine.policy.running:
            if len(cohort) == len(holders):
                return cohort.computed_tokens
            # the running sequences outside the cohort: those admitted since it last grew
            running = SequenceStatus.RUNNING
            return cohort.computed_tokens + sum([
                seq.num_computed for seq in self._joiners
                if seq.decode_from < 0 and seq.status is running])
        return cohort.computed_tokens + sum([seq.num_computed for seq in holders
                                             if seq.decode_from < 0])

    def _decode_run(self, max_steps: int, until_s: float) -> int:
        """`max_steps` decode steps of the members (their memory fits, nobody finishes in
        them), fewer when one would start at or after `until_s`; how many ran."""
        engine, strategy, cohort = self.engine, self.strategy, self.cohort
        num_seqs = len(cohort)
        t_start = engine.clock()
        ends = self.executor.advance_decode_run(num_seqs, cohort.computed_tokens + num_seqs,
                                                max_steps, until_s)
        num_steps = len(ends)
        totals_before = engine.strategy.books_totals()
        books = strategy.grow_cohort_run(cohort.ordinal, num_steps)
        holders, head = engine.policy.holders(), engine.waiting.head()
        engine.step_recorder.record_decode_run(
            t_start, ends, num_seqs, len(engine.waiting), self._computed_tokens(holders),
            books, totals_before, strategy.decode_run_split_parts(head),
            engine.strategy.num_slots)
        step_ends = engine.step_times.ends
        first = len(step_ends)
        step_ends.extend(ends)
        cohort.advance(first, num_steps)
        if engine.strategy.check_accounting:
            self._check_books(holders, head)
        return num_steps

    def _last_step(self, victims: list[Sequence]) -> list[Sequence]:
        """The step that ends a run: every member's one token, its memory known to fit once
        `victims` are preempted (in that order, as the scheduler takes them); the step in
        which the first members sample their last token, or the pool runs dry. The
        sequences that finished in it."""
        engine, strategy, cohort = self.engine, self.strategy, self.cohort
        t_start = engine.clock()
        if victims:
            out = ScheduleOutput()
            for seq in victims:
                cohort.leave(seq)
                engine.policy.preempt(seq, out)  # its memory back, requeued at the front
        num_seqs = len(cohort)
        context = cohort.computed_tokens + num_seqs
        (t_end,) = self.executor.advance_decode_run(num_seqs, context, 1, math.inf)
        strategy.grow_cohort_run(cohort.ordinal, 1)  # the schedule's allocation: it fits now
        cohort.advance(engine.step_times.add(t_end), 1)
        finished = cohort.pop_finished()
        for seq in finished:
            strategy.leave_decode_cohort(seq)
        if engine.async_scheduling:  # seen at the next step; running till then
            ended = engine.see_ending()  # those held since the step before, after this one's
            engine.sampled_in_flight(list(engine.policy.running), finished, t_end)  # schedule
            self._joiners = finished  # running outside the cohort (`_computed_tokens`)
            finished = ended
        else:
            for seq in finished:
                engine.finish(seq, t_end)
        # The row from the books after the finishes, as `Engine.step` makes it.
        holders, head = engine.policy.holders(), engine.waiting.head()
        recorder = engine.step_recorder
        recorder.skip(len(victims))  # (the row's preemptions)
        recorder.record_decode_run(
            t_start, [t_end], num_seqs, len(engine.waiting),
            self._computed_tokens(holders) - num_seqs, [], engine.strategy.books_totals(),
            strategy.decode_run_split_parts(head), engine.strategy.num_slots,
            engine.num_running)
        if engine.strategy.check_accounting:
            self._check_books(holders, head)
        return finished

    def _mixed_step(self, budget: int) -> list[Sequence]:
        """A step in which every member decodes (their memory known to fit) and then the
        queue's prompts are admitted in `budget` tokens, as `Engine.step` runs it: the
        members as one cohort step, costed and recorded by their count and lengths' sum
        (`RunExecutor.execute_mixed_step`), the prompts stepped. The sequences that
        finished in it."""
        engine, strategy, cohort = self.engine, self.strategy, self.cohort
        t_start = engine.clock()
        strategy.grow_cohort_run(cohort.ordinal, 1)  # the running pass of the schedule
        out = self.policy.admit_in_budget(t_start, budget)
        batch, to_sample, forks = engine._build_batch(out.scheduled)
        num_members = len(cohort)
        sampling = SamplingParams(engine.temperature, engine.seed, rows=to_sample, forks=forks)
        t_forward = engine.clock()
        tokens = self.executor.execute_mixed_step(batch, sampling, num_members,
                                                  cohort.computed_tokens + num_members)
        now_s = engine.clock()
        finished = engine._commit(to_sample, tokens, now_s, bool(forks))
        cohort.advance(len(engine.step_times.ends) - 1, 1)  # (the step `_commit` added)
        sampled = [*to_sample, *cohort.members.values()] if engine.async_scheduling else []
        ended = cohort.pop_finished()
        for seq in ended:
            strategy.leave_decode_cohort(seq)
        if engine.async_scheduling:  # seen at the next step; running till then
            finished = engine._see_in_flight(sampled, finished + ended, now_s)
            self._joiners += ended  # running outside the cohort (`_computed_tokens`)
        else:
            for seq in ended:
                engine.finish(seq, now_s)
            finished += ended
        self.admitted(out.admitted)
        split = engine._memory_split()
        engine.step_recorder.record(t_start, engine.clock(), now_s - t_forward, batch, split,
                                    0, engine.num_running, len(engine.waiting), False,
                                    num_unlisted_decodes=num_members)
        if strategy.check_accounting:
            self._check_books(engine.policy.holders(), engine.waiting.head())
        return finished

    def _check_books(self, holders: list[Sequence], head: Sequence | None) -> None:
        """The last row against the books, recomputed from scratch."""
        engine = self.engine
        self.cohort.settle_all()
        split = engine.strategy.memory_split(holders, head)
        last = engine.step_recorder.last
        b = engine.bytes_per_slot
        got = (last.kv_token_bytes, last.kv_reserved_bytes, last.kv_internal_bytes,
               last.kv_external_bytes, last.kv_free_bytes, last.kv_cached_bytes,
               last.kv_prompt_blocks)
        expected = (split.token * b, split.reserved * b, split.internal * b,
                    split.external * b, split.free * b, split.cached * b, split.prompt_blocks)
        if got != expected:
            raise AssertionError(f"{engine.strategy.name}: a decode run's last row {got} "
                                 f"differs from the books {expected}")

