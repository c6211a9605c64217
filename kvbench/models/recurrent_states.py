"""`RecurrentStates`: what a recurrent layer (Gated DeltaNet, Mamba-2) reads and writes of its
sequences' states in one step. The executor hands it to the model beside the attention
callable, so the same model serves every strategy: the model does the math, the executor owns
where each sequence's state lives (the strategy decides which slot)."""

from __future__ import annotations

from typing import Protocol

import torch


class RecurrentStates(Protocol):
    """One step's sequences in the flat batch's order: sequence i holds `query_lens[i]`
    consecutive tokens of the batch.

    `read(layer)` gives each state tensor of recurrent layer `layer`, stacked over the step's
    sequences (`[num_seqs, *shape]`, shapes and order as `RecurrentMixer.state_shapes`: the conv
    state, then the recurrent state), zeros for a sequence that starts fresh (its first chunk,
    or its recompute after a preemption). `write(layer, states)` stores the states after the
    step's tokens, in the same order and shapes."""

    query_lens: list[int]

    def read(self, layer: int) -> tuple[torch.Tensor, ...]: ...

    def write(self, layer: int, states: tuple[torch.Tensor, ...]) -> None: ...


def sequence_groups(query_lens: list[int]) -> dict[int, tuple[list[int], list[int]]]:
    """The step's sequences by query length: length -> (their indices, their first tokens'
    offsets in the flat batch). Sequences of one length run as one batch (every decode
    together), with no padding."""
    groups: dict[int, tuple[list[int], list[int]]] = {}
    start = 0
    for index, length in enumerate(query_lens):
        if length:
            seqs, starts = groups.setdefault(length, ([], []))
            seqs.append(index)
            starts.append(start)
        start += length
    return groups
