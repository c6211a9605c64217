"""What the engine asks the executor to sample: one or more keyed samples per sampled row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbench.core.sequence import Sequence as Seq

SampleKey = tuple[int, int, int]  # (request_id, sample_index, position)


class SamplingParams:
    """`keys[i]` lists the samples wanted from sample row `i`: the sequence's own next token,
    then, for a request's first token with `n > 1`, one per sibling it forks (those share the
    row's logits but are seeded by their own key). Greedy (temperature 0) ignores the keys.

    The engine passes the sampled sequences (`rows`) and the keys of the rare forking rows
    (`forks`); the plain keys are built only when an executor reads `keys`, during the step
    (a key's position is the sequence's computed length): a simulated executor never does.
    """

    __slots__ = ("_keys", "_rows", "forks", "seed", "temperature")

    def __init__(
        self,
        temperature: float,
        seed: int,
        keys: Sequence[tuple[SampleKey, ...]] | None = None,
        *,
        rows: list[Seq] | None = None,
        forks: Mapping[int, tuple[SampleKey, ...]] | None = None,
    ) -> None:
        if (keys is None) == (rows is None):
            raise ValueError("SamplingParams takes either keys or rows")
        self.temperature = temperature
        self.seed = seed
        self._keys = list(keys) if keys is not None else None
        self._rows = rows
        if forks is None:
            forks = {i: k for i, k in enumerate(self._keys or ()) if len(k) > 1}
        self.forks: Mapping[int, tuple[SampleKey, ...]] = forks

    @property
    def num_rows(self) -> int:
        return len(self._keys) if self._keys is not None else len(self._rows or ())

    @property
    def keys(self) -> list[tuple[SampleKey, ...]]:
        if self._keys is None:
            forks = self.forks
            self._keys = [
                forks.get(i) or ((seq.request.request_id, seq.sample_index, seq.num_computed),)
                for i, seq in enumerate(self._rows or ())
            ]
        return self._keys
