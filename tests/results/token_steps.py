"""Sequences with token times of the tests' choosing (an engine's are the ends of its steps)."""

from __future__ import annotations

from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes, add_step_range


def add_token_times(seq: Sequence, times_s: list[float]) -> None:
    """Record tokens sampled at `times_s`, each as a step of its own in the sequence's
    `StepTimes`."""
    if seq.step_times is None:
        seq.step_times = StepTimes()
    for t in times_s:
        k = seq.step_times.add(t)
        add_step_range(seq.token_steps, k, k + 1)
