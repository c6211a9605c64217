"""Building the many `Request`s of a long trace at once, each once with its final fields.

A million-row trace makes a million `Request`s and a million prompts, so their construction
is most of what loading it costs. The cyclic garbage collector is paused while the lists are
built (`paused_gc`): the new objects hold no cycles, yet every few hundred allocations a
collection would walk the young ones again. The plain values they are made of (Python floats
and ints out of numpy columns) are made a block at a time, so that those lists stay small.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import repeat

import numpy as np

from kvbench.core.request import Request
from kvbench.workloads.prompt_tokens import LazyRows, PromptTokens


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (for building many acyclic objects)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Requests built at a time: the lists of plain values they are built from stay this short.
BLOCK = 1 << 16


def build_requests(rows: LazyRows, indexes: np.ndarray, prompt_len: np.ndarray,
                   arrival_s: np.ndarray, output_len: np.ndarray) -> list[Request]:
    """Requests numbered 0, 1, ... whose prompt is the head of `prompt_len[k]` ids of row
    `indexes[k]` of `rows` (a `PromptTokens`), arriving at `arrival_s[k]` with
    `output_len[k]` output tokens, one sample and no prefix or conversation: what
    `Request(k, a, PromptTokens(rows, i, n), o)` gives for each."""
    out: list[Request] = []
    with paused_gc():
        for first in range(0, len(indexes), BLOCK):
            block = slice(first, first + BLOCK)
            index = indexes[block].tolist()
            prompts = list(map(PromptTokens, repeat(rows, len(index)), index,
                               prompt_len[block].tolist()))
            out += map(Request, range(first, first + len(index)), arrival_s[block].tolist(),
                       prompts, output_len[block].tolist())
    return out
