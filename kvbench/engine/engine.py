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
from kvbench.engine.fast_forward import FastForward
from kvbench.engine.group_memory import GroupMemory
from kvbench.engine.step_recorder import StepRecorder
from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.scheduling.base import BatchingPolicy
from kvbench.strategies.base import CacheStrategy, MemorySplit, declares
from kvbench.tracing import NO_RANGE, discard_range, trace_range, tracing_active

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

    `async_scheduling` models vLLM's (`AsyncScheduler` under `EngineCore`'s batch queue):
    step n + 1 is scheduled before step n's output is seen. A sampled token is appended at
    once (vLLM's output placeholder: the next step schedules it), and keeps the time of the
    step that computed it (vLLM's GPU produced it then; its output processing overlaps the
    next step), but a sequence that sampled its last token ends only after the next step is
    scheduled: its seat and memory come back a step later, and `step` returns it then. The
    policy leaves it unscheduled meanwhile (`BatchingPolicy.models_async_scheduling`).
    Fast-forward takes part (`kvbench.engine.fast_forward`): the step that sees last tokens
    is always this engine's.
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
        async_scheduling: bool = False,
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
        # False where the caller reads only how many tokens a finished sequence has (the
        # simulate session: its executor reads no ids), so that a finished sequence whose
        # memory is back lets its ids go (`TokenCount`) instead of holding them to the end.
        self.keep_finished_token_ids = True
        self.holds_token_ids = (executor.reads_token_inputs
                                or not declares(strategy, "reads_no_token_ids"))
        strategy.keeps_table_log = executor.reads_kv_tables
        strategy.set_clock(self.clock)  # (its residency books time blocks on the run's clock)
        self._check_request = RequestCheck(strategy, bytes_per_slot, max_model_len)
        if async_scheduling and not policy.models_async_scheduling:
            raise ValueError(f"{policy.name} batching does not model async scheduling")
        self.async_scheduling = async_scheduling
        # Async scheduling: the sequences that sampled in the last step (their tokens in
        # flight; kept by `step` and a run's last step, for callers that log what a step
        # sees), and those of them that sampled their last token, with its time.
        self.in_flight: list[Sequence] = []
        self._ending: list[tuple[Sequence, float]] = []
        # Runs of decode steps taken at once, where the policy, strategy and executor take
        # part and no probe reads the device after every step.
        self._runs = FastForward.of(self) if memory_probe is None else None
        # A host tier under the prefix cache: sequences that wait for their KV to load sit
        # steps out, as vLLM's `WAITING_FOR_REMOTE_KVS` requests (the policy skips them;
        # `_host_idle`, `_host_done`).
        self._host = strategy.host_tier
        # Per sequence that waited for a host load before its first token: admission to the
        # load's end, seconds (TTFT's loading part, each also the sequence's `kv_loaded_s`).
        self.host_load_waits_s: list[float] = []
        # Preemption by swap: per swapped-in sequence, re-admission to its load's end
        # (`swap_in_wait_ms`), and when each sequence still loading was admitted again.
        self.swap_in_waits_s: list[float] = []
        self._swap_in_at: dict[int, float] = {}

    # Requests ---------------------------------------------------------------------------

    def check_request(self, request: Request) -> None:
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
        runs = self._runs
        if runs is not None:
            runs.before_step()
        # Checked once a step: with nobody recording, the ranges and their arguments are
        # not built at all.
        traced = self._traced = tracing_active()
        step_range = trace_range("step", step=self.step_recorder.num_steps) if traced else NO_RANGE
        with step_range:
            with (trace_range("schedule", waiting=len(self.waiting), running=self.num_running)
                  if traced else NO_RANGE):
                out = self.policy.schedule(t_start)
            if self._host is not None and (self._host.swap_ins or self._swap_in_at):
                self._swap_ins_admitted(t_start, out.preempted)
            if not out.scheduled:  # no row in steps.csv: none in the trace either
                discard_range(step_range)
                waited = self._host is not None and self._host_idle()
                return self._schedule_nothing(len(out.preempted), waited)
            batch, to_sample, forks = self._build_batch(out.scheduled)
            sampling = SamplingParams(self.temperature, self.seed, rows=to_sample, forks=forks)
            t_forward = self.clock()
            tokens = self.executor.execute_and_sample(batch, sampling)
            now_s = self.clock()
            forward_s = now_s - t_forward
            finished = self._commit(to_sample, tokens, now_s, bool(forks))
            if self._host is not None:
                self._host_done(now_s)
            if self.async_scheduling:  # the last step's output, seen now
                finished = self._see_in_flight(to_sample, finished, now_s)
            if runs is not None:  # the prompts this step admitted join at the next run
                runs.admitted(out.admitted)
            split = self._memory_split()
        self.step_recorder.record(t_start, self.clock(), forward_s, batch, split,
                                  len(out.preempted), self.num_running, len(self.waiting), traced,
                                  None if self._host is None else len(self._host.loading))
        return finished

    def _host_idle(self) -> bool:
        """Nothing to compute: start the host copies decided anyway, and where sequences
        wait for loads (or swapped-out ones for their stores), wait for the next job to end;
        whether it waited."""
        host = self._host
        transfers = host.take()
        if transfers is not None:
            self.executor.transfer_host(transfers)
            self.step_recorder.host_copies(transfers)
        if host.loading or (host.swaps and host.jobs_in_flight):
            self.executor.wait_host_jobs()
            self._host_done(self.clock())
            return True
        return False

    def _drain_host(self) -> None:
        """Every host copy decided (a warm-up's last stores) started and waited for, so that
        none is still in flight when the run proper starts on a clock back at zero."""
        host = self._host
        transfers = host.take()
        if transfers is not None:
            self.executor.transfer_host(transfers)
        while host.jobs_in_flight:
            in_flight = host.jobs_in_flight
            self.executor.wait_host_jobs()
            self._host_done(self.clock())
            if host.jobs_in_flight == in_flight:
                raise RuntimeError("host tier jobs in flight that the executor never ends")

    def _swap_ins_admitted(self, now_s: float, preempted: list[Sequence]) -> None:
        """Sequences admitted again by swap-in this step: their wait for the load starts
        (one preempted again while it loads waits no more)."""
        for seq in preempted:
            self._swap_in_at.pop(seq.seq_id, None)
        for seq_id in self._host.swap_ins:
            self._swap_in_at[seq_id] = now_s
        self._host.swap_ins.clear()

    def _host_done(self, now_s: float) -> None:
        """The executor's finished host jobs back to the strategy; the sequences whose KV
        arrived before their first token record when, and how long it took, swapped-in ones
        how long since their re-admission."""
        done = self.executor.finished_host_jobs()
        if done:
            for seq in self.strategy.host_jobs_done(done):
                swapped_in_s = self._swap_in_at.pop(seq.seq_id, None)
                if swapped_in_s is not None:
                    self.swap_in_waits_s.append(now_s - swapped_in_s)
                elif seq.first_token_s is None and seq.admitted_s is not None:
                    seq.kv_loaded_s = now_s
                    self.host_load_waits_s.append(now_s - seq.admitted_s)

    def settle(self) -> None:
        """Bring every running sequence's counts and token times up to date (the decode
        cohort's members are advanced by counting): before anything reads them from outside
        the engine, e.g. the results of a run that stopped."""
        if self._runs is not None:
            self._runs.settle()

    def fast_forward(self, until_s: float = math.inf,
                     through_finishes: bool = False) -> tuple[int, list[Sequence]]:
        """Run the decode steps that come next in one move where the policy, strategy and
        executor take part (`kvbench.engine.fast_forward`), with the results of stepping."""
        if self._runs is None:
            return 0, []
        return self._runs.run(until_s, through_finishes)

    def _memory_split(self) -> MemorySplit:
        """The strategy's split of the holders' memory, with the queue head."""
        holders, head = self.policy.holders(), self.waiting.head()
        if self._runs is not None:
            return self._runs.memory_split(holders, head)
        return self.strategy.memory_split(holders, head)

    def _schedule_nothing(self, num_preempted: int, host_waited: bool = False) -> list[Sequence]:
        """A step with nothing to run: no row (the preemptions go in the next), no
        finished sequences; raises when the queue head can never be admitted (after a step
        that preempted everyone, the next one admits: `vllm-v1` admits nothing in it; after
        one that waited for host copies, the next may)."""
        self.step_recorder.skip(num_preempted)
        ended = self._see_in_flight([], [], 0.0) if self.async_scheduling else []
        if (self.waiting and not self.policy.has_work() and not num_preempted and not ended
                and not host_waited):
            raise KvbenchRunError(
                f"scheduler stalled: request {self.waiting.head().request.request_id} "
                "cannot be admitted into an empty cache"
            )
        return ended

    def _see_in_flight(self, sampled: list[Sequence], last: list[Sequence],
                       now_s: float) -> list[Sequence]:
        """Async scheduling, after a step was scheduled: the sequences whose last token the
        step before sampled end now (at that token's time); this step's `sampled` tokens are
        in flight, `last` of them the last of their sequence. Returns those that ended."""
        ended = self._ending
        self.sampled_in_flight(sampled, last, now_s)
        for seq, at_s in ended:
            self.finish(seq, at_s)
        return [seq for seq, _ in ended]

    def sampled_in_flight(self, sampled: list[Sequence], last: list[Sequence],
                          now_s: float) -> None:
        """Async scheduling: the last step's `sampled` sequences have their tokens in flight,
        `last` of them (sampled at `now_s`) their sequence's last."""
        self.in_flight = sampled
        self._ending = [(seq, now_s) for seq in last]

    def see_ending(self) -> list[Sequence]:
        """Async scheduling, after a step was scheduled (a decode run's, which keeps
        `in_flight` itself): end the sequences whose last token the step before sampled, at
        that token's time; returns them."""
        ended, self._ending = self._ending, []
        for seq, at_s in ended:
            self.finish(seq, at_s)
        return [seq for seq, _ in ended]

    def ending_unseen(self) -> int:
        """Async scheduling: how many sequences sampled their last token in the last step,
        not yet seen (they end at the next step, after it is scheduled)."""
        return len(self._ending)

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
            if not self.async_scheduling:  # else they end when seen (`_see_in_flight`)
                for seq in finished:
                    self.finish(seq, now_s)
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
            child.kv_loaded_s = parent.kv_loaded_s
            if self.strategy.fork(parent, child) is None:
                self.policy.requeue(child)  # no room to share or copy: prefill on its own
                continue
            child.num_computed = parent.prompt_len
            child.cached_prompt_tokens = parent.prompt_len
            self.policy.add_running(child)
            if self._runs is not None:
                self._runs.admitted([child])
            # finished at once (a one-token output): its memory is back before the next fork
            if self._append_tokens([child], [tokens[sample_index - 1]], now_s, step):
                self.finish(child, now_s)

    def finish(self, seq: Sequence, now_s: float) -> None:
        """`seq` sampled its last token at `now_s`."""
        preempted = seq.status is SequenceStatus.WAITING
        seq.status = SequenceStatus.FINISHED
        seq.finish_s = now_s
        if preempted:  # async: preempted with its last token in flight; its memory is back
            self.policy.waiting.remove(seq)
        else:
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
        if self._host is not None:  # (before the tier's figures go: the copies are the warm-up's)
            self._drain_host()
        self.executor.reset_stats()
        self.strategy.reset_stats()
        self.host_load_waits_s.clear()
        self.swap_in_waits_s.clear()
        if self._runs is not None:
            self._runs.settle()
