"""`BaseEngine`: what kvbench's `Engine` and `--engine hf` share, the request book and run control."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from typing import Protocol

from kvbench.core.clock import RunClock, WallClock
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence, TokenCount
from kvbench.core.step_record import StepRecord
from kvbench.core.step_times import StepTimes
from kvbench.engine.step_recorder import StepLog
from kvbench.scheduling.queue_order import WaitingQueue
from kvbench.strategies.base import CacheStrategy


class RequestQueues(Protocol):
    """What the runner reads of an engine's policy: the sequences in flight, in admission
    order, and those not admitted yet."""

    running: list[Sequence]
    waiting: WaitingQueue


class BaseEngine(ABC):
    """The runner's view of an engine: queued and finished requests, step records, run control.

    Subclasses set `policy` and `strategy`, add requests and run steps. `clock()` returns
    seconds on the run's clock (wall time since the engine was built unless given one). Each
    step's `StepRecord` goes through `step_recorder` (a `StepLog`): into `steps`, or to its
    `sink` when a runner streams rows to disk.
    """

    policy: RequestQueues  # owns the queues (a `BatchingPolicy` for kvbench's engine)
    strategy: CacheStrategy | None  # None: the engine has no kvbench cache strategy
    # Trace ranges whose time the engine's executor models and draws itself in a Chrome
    # trace (`TraceRecorder.drawn_by_executor`); none for an engine that measures them.
    drawn_trace_ranges: frozenset[str] = frozenset()

    def __init__(
        self, *, max_model_len: int, temperature: float, seed: int, clock: RunClock | None
    ) -> None:
        self.max_model_len = max_model_len
        self.temperature = temperature
        self.seed = seed
        self.clock: RunClock = clock if clock is not None else WallClock()
        self.sequences: dict[int, list[Sequence]] = {}
        self.steps: list[StepRecord] = []
        self.step_recorder = StepLog(self.steps)
        self.prefill_tokens_computed = 0
        self._seq_ids = itertools.count()
        # Every step's end: the token times of the sequences (`Sequence.token_steps`).
        self.step_times = StepTimes()
        # False where neither the executor nor the strategy reads a sequence's token ids (a
        # simulation under paged or contiguous): sequences then count their tokens
        # (`TokenCount`), and a workload's prompts are never drawn (`PromptTokens`).
        self.holds_token_ids = True
        self._unfinished = 0

    def _new_sequence(self, request: Request, sample_index: int) -> Sequence:
        """Sample `sample_index` of `request`, holding its prompt so far (its length only
        where nothing reads the ids: `holds_token_ids`)."""
        return Sequence(next(self._seq_ids), request, sample_index, self._prompt_tokens(request),
                        step_times=self.step_times)

    def _prompt_tokens(self, request: Request) -> list[int] | TokenCount:
        """A new sequence's tokens: a copy of the prompt's ids, or their count."""
        prompt = request.prompt_token_ids
        return list(prompt) if self.holds_token_ids else TokenCount(len(prompt))

    @abstractmethod
    def check_request(self, request: Request) -> None:
        """Raise `KvbenchInputError` for a request that could never run on this engine."""

    @abstractmethod
    def add_request(self, request: Request, checked: bool = False) -> None:
        """Queue the request (raises `KvbenchInputError` for one that could never run;
        `checked`: the caller has had it through `check_request` already)."""

    @abstractmethod
    def step(self) -> list[Sequence]:
        """Run the next unit of work; returns the sequences that finished in it."""

    def fast_forward(self, until_s: float,
                     through_finishes: bool = False) -> tuple[int, list[Sequence]]:
        """Run the next steps in one move where they are a run nothing can change, none
        starting at or after `until_s` (`through_finishes`: nor stopping at a step in which
        sequences finish); how many ran (none by default: `step` runs each) and the
        sequences that finished in them."""
        return 0, []

    def settle(self) -> None:
        """Bring the running sequences' counts and token times up to date, where the engine
        advances some of them by counting (none by default)."""
        return None

    def has_unfinished(self) -> bool:
        return self._unfinished > 0

    @property
    def waiting(self) -> WaitingQueue:
        """The policy's waiting queue, head first."""
        return self.policy.waiting

    @property
    def num_running(self) -> int:
        return len(self.policy.running)

    def drain(self) -> None:
        """Give back memory still held once every request has finished (none by default)."""
        return None

    def reset_stats(self) -> None:
        """Forget finished requests and step records (after warm-up)."""
        if self.has_unfinished():
            raise RuntimeError("reset_stats with requests still running")
        self.sequences.clear()
        self.steps.clear()
        self.step_recorder.reset()
        self.prefill_tokens_computed = 0

    def run_to_completion(self) -> None:
        while self.has_unfinished():
            self.step()
        self.drain()
