"""`ring_slots`: how many slots a contiguous reservation needs for one sliding-window group
(and `ring_copies`: a fork's copies between two rings).

A layer of window W reads, for a query at position p, keys p - W + 1 .. p. A step that writes
C new tokens of a sequence from position s reads keys from s - W + 1 on, so the slots that
must be distinct at once are the (at most) W - 1 tokens before the chunk and its C new ones.
A ring of `W - 1 + C_max` slots, token p at `ring_start + p % ring`, therefore never
overwrites a key that a query of the same or a later step still sees.

C_max is what the scheduler lets one step write for one sequence (`kvbench.scheduling`):

- without chunked prefill the whole prompt P is written in its first step (the builder keeps
  `max_num_batched_tokens` >= `max_model_len`, so a prompt is never cut), and every later step
  of the sequence decodes one token: the ring needs max(P, W) slots;
- with chunked prefill (and under `vllm-v1`, which always chunks) a chunk holds at most
  `max_num_batched_tokens` tokens: the first chunk min(P, B) with nothing before it, a later
  one at most min(P - 1, B) after at most W - 1 visible tokens, a decode one.

A reservation is never grown or preempted, so these bounds hold for the sequence's life.
"""

from __future__ import annotations

from kvbench.core.layout import SlotCopy


def ring_slots(window: int, prompt_len: int, reservation: int, chunked_prefill: bool,
               max_num_batched_tokens: int) -> int:
    """Slots of a window group's ring for a sequence of `prompt_len` prompt tokens."""
    if chunked_prefill:
        budget = max_num_batched_tokens
        first_write = min(prompt_len, budget)
        later_write = max(1, min(prompt_len - 1, budget))
    else:
        first_write = prompt_len
        later_write = 1
    return min(reservation, max(first_write, window - 1 + later_write))


def ring_copies(src: int, src_len: int, dst: int, dst_len: int,
                num_tokens: int) -> list[SlotCopy]:
    """Copies that move the last tokens of a ring of `src_len` at `src` (of `num_tokens`
    computed) into a ring of `dst_len` at `dst`, as many as both hold, in runs of slots that
    are consecutive in both."""
    first = max(0, num_tokens - min(src_len, dst_len))
    copies: list[SlotCopy] = []
    pos = first
    while pos < num_tokens:
        s, d = pos % src_len, pos % dst_len
        run = min(num_tokens - pos, src_len - s, dst_len - d)
        copies.append(SlotCopy(src + s, dst + d, run))
        pos += run
    return copies

