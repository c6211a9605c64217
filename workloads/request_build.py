"""Building the many `Request`s of a long trace at once, each once with its final fields.

A million-row trace makes a million `Request`s and a million prompts, so their construction
is most of what loading it costs. Three things make it cheaper without changing what is
built:

- the cyclic garbage collector is paused while the lists are built (`paused_gc`): the new
  objects hold no cycles, yet every few hundred allocations a collection would walk the
  young ones again (measured: ~0.5 µs per object, as much as building it);
- `Request` is a frozen dataclass, whose `__init__` sets each of its 7 fields through
  `object.__setattr__` looked up as a global; `build_requests` makes the same calls with the
  function held locally (0.6 instead of 0.8 µs a request). The result is the same object
  (same fields, same attribute layout, equal to `Request(...)`); when `Request` no longer
  has the fields this expects, or has a `__post_init__`, its own constructor is used;
- the plain values they are made of (Python floats and ints out of numpy columns) are made
  a block at a time, so that those lists stay small.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields
from itertools import repeat

import numpy as np

from kvbench.core.request import Request
from kvbench.workloads.prompt_tokens import LazyRows, PromptTokens

# `Request`'s fields as `build_requests` sets them: the first four given, the rest defaults.
_FIELDS = ("request_id", "arrival_s", "prompt_token_ids", "output_len", "n", "prefix_id",
           "conversation_id")
_DEFAULTS = (1, None, None)


def _direct_ok() -> bool:
    """Whether setting `_FIELDS` in order builds exactly what `Request(...)` builds."""
    found = fields(Request)
    return (tuple(f.name for f in found) == _FIELDS and all(f.init for f in found)
            and tuple(f.default for f in found[4:]) == _DEFAULTS
            and all(f.default is MISSING and f.default_factory is MISSING for f in found[:4])
            and not hasattr(Request, "__post_init__"))


DIRECT = _direct_ok()


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
            _append_requests(out, first, arrival_s[block].tolist(), prompts,
                             output_len[block].tolist())
    return out


def _append_requests(out: list[Request], first: int, arrival_s: list[float],
                     prompts: list[PromptTokens], output_len: list[int]) -> None:
    """Append `Request(first + k, arrival_s[k], prompts[k], output_len[k])` for each k."""
    ids = range(first, first + len(prompts))
    if not DIRECT:
        out += map(Request, ids, arrival_s, prompts, output_len)
        return
    new = object.__new__
    put = object.__setattr__
    n_, prefix_, conversation_ = _DEFAULTS
    append = out.append
    # the same attribute stores, in the same order, as the dataclass's __init__
    for i, a, p, o in zip(ids, arrival_s, prompts, output_len, strict=True):
        r = new(Request)
        put(r, "request_id", i)
        put(r, "arrival_s", a)
        put(r, "prompt_token_ids", p)
        put(r, "output_len", o)
        put(r, "n", n_)
        put(r, "prefix_id", prefix_)
        put(r, "conversation_id", conversation_)
        append(r)


__all__ = ["BLOCK", "DIRECT", "build_requests", "paused_gc"]
