"""What the engine asks the executor to sample: one or more keyed samples per sampled row."""

from __future__ import annotations

from dataclasses import dataclass

SampleKey = tuple[int, int, int]  # (request_id, sample_index, position)


@dataclass(frozen=True)
class SamplingParams:
    """`keys[i]` lists the samples wanted from sample row `i`: the sequence's own next token,
    then, for a request's first token with `n > 1`, one per sibling it forks (those share the
    row's logits but are seeded by their own key). Greedy (temperature 0) ignores the keys."""

    temperature: float
    seed: int
    keys: list[tuple[SampleKey, ...]]
