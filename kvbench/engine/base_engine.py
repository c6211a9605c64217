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
    step's `StepRecord` goes through `step_recorder` (a `StepLog`).
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
        self.step_times = StepTimes()  # every step's end: the sequences' token times
        # False where neither the executor nor the strategy reads a sequence's token ids:
        # sequences then count their tokens (`TokenCount`), and prompts are never drawn.
        self.holds_token_ids = True
        self._unfinished = 0

    def _new_sequence(self, request: Request, sample_index: int) -> Sequence:
        """Sample `sample_index` of `request`, holding a copy of its prompt's ids (their
        count only where nothing reads them: `holds_token_ids`)."""
        prompt = request.prompt_token_ids
        tokens = list(prompt) if self.holds_token_ids else TokenCount(len(prompt))
        return Sequence(next(self._seq_ids), request, sample_index, tokens,
                        step_times=self.step_times)

    @abstractmethod
    def check_request(self, request: Request) -> None:
        """Raise `KvbenchInputError` for a request that could never run on this engine."""

    @abstractmethod
    def add_request(self, request: Request, checked: bool = False) -> None:
        """Queue the request (`checked`: it went through `check_request` already)."""

    @abstractmethod
    def step(self) -> list[Sequence]:
        """Run the next unit of work; returns the sequences that finished in it."""

    def fast_forward(self, until_s: float,
                     through_finishes: bool = False) -> tuple[int, list[Sequence]]:
        """Steps run in one move and the sequences finished in them (`Engine.fast_forward`;
        none by default: `step` runs each)."""
        return 0, []

    def settle(self) -> None:
        """Bring sequences advanced by counting up to date (none by default)."""
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
