"""`StepTimes`: the end time of every step an engine ran; a sequence's token times point into it.

A token is sampled at the end of a step. An engine keeps one `StepTimes` (8 bytes a step) and
each sequence the steps it sampled in as ranges (`Sequence.token_steps`), not a float per
token: a million-request simulation samples hundreds of millions of tokens in a few million
steps (`kvbench.results.token_times` gathers them in one vectorized pass).

A range is of engine steps, `(start, stop)`, or of the steps of the engine's decode cohort
(`kvbench.engine.decode_cohort`), written `(~start, ~stop)` (negative: it never extends an
engine range): a cohort's steps need not be consecutive engine steps (a step that only
admits prompts runs between them), so a member's stretch is one range of `cohort_steps`.
"""

from __future__ import annotations

from array import array


class StepTimes:
    """End times (seconds on the run's clock) of an engine's steps, step `k`'s at `ends[k]`,
    in the order they ran, and `cohort_steps[j]`, the engine step of the decode cohort's `j`th
    step. Both only grow: an index stays valid for the engine's life."""

    __slots__ = ("ends", "cohort_steps")

    def __init__(self) -> None:
        self.ends = array("d")
        self.cohort_steps = array("q")

    def __len__(self) -> int:
        return len(self.ends)

    def add(self, end_s: float) -> int:
        """Record the next step's end; returns its index."""
        ends = self.ends
        ends.append(end_s)
        return len(ends) - 1

    def times(self, token_steps: list[int]) -> list[float]:
        """The end times of the steps that `token_steps` name, in order."""
        ends, cohort = self.ends, self.cohort_steps
        out: list[float] = []
        for i in range(0, len(token_steps), 2):
            start, stop = token_steps[i], token_steps[i + 1]
            if start >= 0:
                out += ends[start:stop]
            else:
                out += [ends[k] for k in cohort[~start : ~stop]]
        return out


def add_step_range(token_steps: list[int], first: int, stop: int) -> None:
    """Record that a sequence sampled one token in each of engine steps `first .. stop - 1`
    (`token_steps`: flat `[start, stop, start, stop, ...]` ranges, oldest first): a range
    that starts where the last one stops extends it."""
    if token_steps and token_steps[-1] == first:
        token_steps[-1] = stop
    else:
        token_steps += (first, stop)

