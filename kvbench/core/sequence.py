"""A sequence being generated: one sample of one request, and its timestamps."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kvbench.core.request import Request
from kvbench.core.step_times import StepTimes


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class TokenCount:
    """A sequence's token ids where nothing reads them, kept as how many there are: a
    simulated sequence under a strategy that reads no ids (`Engine.holds_token_ids`), or a
    finished one whose memory is back (`Engine.keep_finished_token_ids`), so that a long
    simulation holds no pointer per token and draws no prompt's ids."""

    __slots__ = ("_count",)

    def __init__(self, count: int) -> None:
        self._count = count

    def __len__(self) -> int:
        return self._count

    def append(self, token: int) -> None:
        self._count += 1

    def extend(self, tokens: list[int]) -> None:
        self._count += len(tokens)

    def __repr__(self) -> str:
        return f"TokenCount({self._count})"


@dataclass(eq=False, slots=True)  # read in every per-sequence loop of every step
class Sequence:
    """Token state of one sample. `num_computed` tokens have their KV in the cache.

    Strategies read `num_computed`, `token_ids` and `request` to do their bookkeeping; the
    engine alone changes them.
    """

    seq_id: int
    request: Request
    sample_index: int
    token_ids: list[int] | TokenCount
    num_computed: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    preemptions: int = 0
    admitted_s: float | None = None
    # When the KV it waited for arrived from a host tier, before its first token (None: it
    # waited for no load): TTFT's loading part is admitted_s to this
    kv_loaded_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    # The steps it sampled a token in, as flat [start, stop, ...] ranges of `step_times`
    # (a float per token would be gigabytes in a long simulation; `token_times_s` reads them).
    token_steps: list[int] = field(default_factory=list)
    step_times: StepTimes | None = None  # the engine's (None: no token sampled yet)
    # The engine's decode cohort step this sequence joined it at (-1: not a member) and its
    # `num_computed` then: a member's `num_computed`, `token_ids` and `token_steps` stay as
    # they were then until the cohort settles it (`kvbench.engine.decode_cohort`).
    decode_from: int = -1
    decode_base: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens served from a prefix cache at first admission
    # The request's lengths as plain attributes: read in the engine's per-sequence loops.
    prompt_len: int = field(init=False)
    end_len: int = field(init=False)  # how many tokens the sequence holds once finished

    def __post_init__(self) -> None:
        request = self.request
        self.prompt_len = len(request.prompt_token_ids)
        self.end_len = self.prompt_len + request.output_len

    @property
    def token_times_s(self) -> list[float]:
        """Each output token's time (seconds on the run's clock), in order: the ends of the
        steps it was sampled in."""
        steps = self.token_steps
        return self.step_times.times(steps) if steps else []

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.request.prompt_len

    @property
    def is_finished(self) -> bool:
        return self.num_generated >= self.request.output_len

    @property
    def final_kv_len(self) -> int:
        return self.request.final_kv_len

    @property
    def num_uncomputed(self) -> int:
        """Tokens whose KV is not yet in the cache (the whole prompt before prefill, 1 in decode)."""
        return len(self.token_ids) - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.num_computed > 0 and self.num_uncomputed == 1 and self.num_generated > 0
