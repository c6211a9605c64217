"""Sequences with token times of the tests' choosing (an engine's are the ends of its steps)."""

from __future__ import annotations

from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes, add_step_range

# The one engine's step ends every such sequence's tokens point into (a run's token times
# are one engine's), each sequence's at steps of its own.
_STEP_TIMES = StepTimes()


def add_token_times(seq: Sequence, times_s: list[float]) -> None:
    """Record tokens sampled at `times_s`, each at a step of its own."""
    seq.step_times = _STEP_TIMES
    for t in times_s:
        k = _STEP_TIMES.add(t)
        add_step_range(seq.token_steps, k, k + 1)
