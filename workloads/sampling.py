"""Seeded random streams, length distributions and random token ids shared by the workloads.

Every draw comes from a numpy `Generator` of `(seed, stream name)`, so one seed always gives the
same requests and, say, the arrival process never changes the lengths."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from functools import partial

import numpy as np

from kvbench.workloads.bounds import check_workload_fits
from kvbench.workloads.prompt_tokens import LazyRows, PromptTokens

# Lengths drawn from an unbounded distribution are capped here before any model-length
# clipping, only so that an extreme draw cannot overflow an integer.
MAX_SAMPLED_LEN = 1 << 24
# Draws of more tokens than this are checked against free memory first (a smaller one costs
# less than the check).
CHECKED_DRAW_TOKENS = 1 << 20


def rng_for(seed: int, stream: str) -> np.random.Generator:
    """An independent numpy Generator for `(seed, stream)`; the same pair gives the same draws."""
    return np.random.default_rng([int(seed) & 0xFFFF_FFFF_FFFF_FFFF, zlib.crc32(stream.encode())])


def lognormal_mu(mean: float, sigma: float) -> float:
    """The log-scale mean μ of a lognormal with arithmetic mean `mean` and log-scale σ."""
    return math.log(mean) - sigma * sigma / 2.0


def lognormal_lengths(rng: np.random.Generator, n: int, mu: float, sigma: float) -> np.ndarray:
    """`n` token counts ~ round(LogNormal(μ, σ)), at least 1."""
    values = np.rint(rng.lognormal(mu, sigma, n))
    return np.clip(values, 1, MAX_SAMPLED_LEN).astype(np.int64)


def uniform_lengths(rng: np.random.Generator, n: int, span: tuple[int, int]) -> np.ndarray:
    """`n` token counts uniform on the inclusive integer range `span`."""
    low, high = span
    return rng.integers(low, high + 1, n, dtype=np.int64)


# Token ids drawn at a time: the draw's int64 array and its list of ids stay this small,
# however many tokens the workload holds (a trace of a million requests has ~10^9).
_DRAW_TOKENS = 1 << 20


def _check_prompts_fit(num_tokens: int) -> None:
    check_workload_fits(0, num_tokens, "the workload's prompts", "replay fewer requests "
                        "(--num-requests) or shorter prompts (--workload-param)")


class TokenSampler:
    """Random token ids in `[0, vocab_size)` as Python ints.

    The ids are drawn in bulk with numpy, in chunks of `_DRAW_TOKENS` (chunked draws of a
    numpy `Generator` give the same ids as one draw of their total), and mapped onto one
    shared int object per id, so a workload of millions of tokens costs one pointer per
    token, and building it never holds more than a chunk of temporaries.
    """

    def __init__(self, rng: np.random.Generator, vocab_size: int) -> None:
        self._rng = rng
        self._vocab_size = vocab_size
        # One int object per id, as an object array: indexing it by a draw gives the
        # shared objects without making an int per token.
        self._ids = np.arange(vocab_size, dtype=np.int64).astype(object)

    def _draw(self, n: int) -> np.ndarray:
        """`n` ids as the shared int objects (an object array; at most a chunk's worth, so
        the temporaries stay small)."""
        return self._ids[self._rng.integers(0, self._vocab_size, int(n), dtype=np.int64)]

    def tokens(self, n: int) -> list[int]:
        """`n` random token ids (a draw too large for the machine's memory is refused)."""
        n = int(n)
        if n > CHECKED_DRAW_TOKENS:
            _check_prompts_fit(n)
        out: list[int] = []
        for start in range(0, n, _DRAW_TOKENS):
            out += self._draw(min(_DRAW_TOKENS, n - start)).tolist()
        return out

    def lazy_rows(self, lengths: Sequence[int] | np.ndarray) -> list[PromptTokens]:
        """What `rows(lengths)` gives, as prompts that know their length and draw the ids of
        all of them on the first read of any (`prompt_tokens.py`): the sampler must draw
        nothing else, so that the ids are the same whenever they are drawn."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return self.lazy_source(lengths).prompts(lengths.tolist())

    def lazy_source(self, lengths: Sequence[int] | np.ndarray) -> LazyRows:
        """The rows `lazy_rows(lengths)` reads from, for a caller that makes the prompts
        itself (row `i` of `lengths`, or a head of it: `PromptTokens(source, i, n)`); their
        draw is checked to fit in memory however few tokens (a lazy workload's loader checked
        only its requests)."""
        return LazyRows(partial(self.rows, np.asarray(lengths, dtype=np.int64), True))

    def rows(self, lengths: Sequence[int] | np.ndarray,
             always_check: bool = False) -> list[tuple[int, ...]]:
        """One tuple of random token ids per entry of `lengths` (the ids `tokens` would give
        for their total, cut in order)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        total = int(lengths.sum())
        if always_check or total > CHECKED_DRAW_TOKENS:
            _check_prompts_fit(total)
        ends = np.cumsum(lengths)
        out: list[tuple[int, ...]] = []
        first, drawn = 0, 0  # the next row, and the tokens of the rows before it
        while first < len(lengths):
            # The rows whose tokens fit in one chunk (at least one row, however long), drawn
            # at once: consecutive draws are one draw cut in order.
            last = max(first + 1, int(np.searchsorted(ends, drawn + _DRAW_TOKENS, "right")))
            ids = self._draw(int(ends[last - 1]) - drawn)
            start = 0
            for end in (ends[first:last] - drawn).tolist():
                out.append(tuple(ids[start:end].tolist()))
                start = end
            drawn = int(ends[last - 1])
            first = last
        return out
