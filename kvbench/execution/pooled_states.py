"""`StatePool`: a state-space hybrid's recurrent states kept in the KV arena's own blocks, and
`PooledStates`, one step's view of them (the `RecurrentStates` a hybrid model reads and
writes).

Where the memory lives: vLLM keeps each sequence's Mamba / Gated DeltaNet state in pages of
the same KV pool as attention (its hybrid allocator, `kvbench.sizing.state_pages`), and
`paged` charges a hybrid's sequence `state_blocks` blocks of the pool for it from admission
to finish (`PagedStrategy.states`). kvbench's executor stores the state in exactly those
blocks' bytes: no tensor beside the arena, so `--kv-memory` (the arena) holds KV and states
both, and the memory split's `internal` share (state blocks, held without tokens) is bytes
that really hold state. The strategy picks the blocks (`KVLayout.state_blocks`); the
executor only reads and writes them, and a fork copies them as it copies KV blocks.

A block of the arena is `block_size` slots of every attention layer's K and V tensors
(`KVArena.pool_tensors`, each `[num_slots, ...]`): one contiguous run of bytes per tensor.
A sequence's state bytes are its blocks' runs in order (block by block, tensor by tensor),
and within them each recurrent layer's conv state then its SSM state, in the model's layer
order, each in its own dtype (`RecurrentMixer.state_shapes`: the conv state in the model's
dtype, the SSM state in `ssm_state_dtype`, float32 where set): the raw bytes, whatever the
arena's dtype (an fp8 arena's too). `state_placement` sizes the blocks from vLLM's page, which
holds a layer's state padded to a page, so they always have room (checked here).

A step gathers each scheduled sequence's state bytes once (zeros for a sequence computing
from its first token: a new prompt, or a recompute after preemption), the model reads and
writes them by layer, and `store` scatters them back into the blocks after the forward. The
copies are the price of one arena for KV and states on every device; vLLM's CUDA kernels
read the states in place through their slot indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kvbench.execution.host_kv_tier import block_runs
from kvbench.models.recurrent import RecurrentMixer


def state_blocks_for(executor_arena_tensors: Sequence[torch.Tensor], block_size: int,
                     mixer: RecurrentMixer, recurrent_layers: Sequence[int],
                     model_dtype: torch.dtype) -> int:
    """Blocks of `block_size` slots of the arena a sequence's state needs (for a layout built
    by hand, as the fp8 accuracy measurement builds its own)."""
    pool = StatePool(executor_arena_tensors, block_size, mixer, recurrent_layers, model_dtype,
                     None)
    return -(-pool.state_bytes // pool.block_bytes)


class StatePool:
    """Where each recurrent layer's state sits in a sequence's state blocks."""

    def __init__(self, pool_tensors: Sequence[torch.Tensor], block_size: int,
                 mixer: RecurrentMixer, recurrent_layers: Sequence[int],
                 model_dtype: torch.dtype, state_blocks: int | None) -> None:
        self.tensors = tuple(pool_tensors)
        self.block_size = block_size
        ssm_dtype = torch.float32 if mixer.ssm_state_dtype == "fp32" else model_dtype
        conv_shape, ssm_shape = mixer.state_shapes()
        # layer -> ((byte offset, shape, dtype) of its conv state, of its SSM state)
        self.places: dict[int, tuple[tuple[int, tuple[int, ...], torch.dtype], ...]] = {}
        offset = 0
        for layer in recurrent_layers:
            places = []
            for shape, dtype in ((conv_shape, model_dtype), (ssm_shape, ssm_dtype)):
                places.append((offset, shape, dtype))
                offset += math.prod(shape) * dtype.itemsize
            self.places[layer] = tuple(places)
        self.state_bytes = offset  # one sequence's, every recurrent layer's
        if state_blocks is not None and state_blocks * self.block_bytes < self.state_bytes:
            raise ValueError(f"{state_blocks} state blocks of {self.block_bytes} bytes cannot "
                             f"hold a sequence's {self.state_bytes} bytes of state")

    @property
    def block_bytes(self) -> int:
        return sum(t[: self.block_size].numel() * t.element_size() for t in self.tensors)

    def _runs(self, blocks: Sequence[int]) -> list[torch.Tensor]:
        """The blocks' bytes as uint8 views of the arena, in order, up to the state's size:
        consecutive blocks as one span of each tensor (a `contiguous` range's one-slot
        blocks: one copy a tensor). Gather and scatter walk a list of blocks alike, so a
        state copied between blocks spanned differently keeps its bytes."""
        runs, need, bs = [], self.state_bytes, self.block_size
        for first, _, count in block_runs(blocks, blocks):
            for tensor in self.tensors:
                if need <= 0:
                    return runs
                run = tensor[first * bs : (first + count) * bs].reshape(-1).view(torch.uint8)
                runs.append(run[:need])
                need -= run.numel()
        if need > 0:
            raise ValueError(f"state blocks {list(blocks)} hold {self.state_bytes - need} of a "
                             f"sequence's {self.state_bytes} bytes of state")
        return runs

    def gather(self, blocks: Sequence[int], out: torch.Tensor) -> None:
        """Copy the state held in `blocks` into `out` (`[state_bytes]` uint8)."""
        start = 0
        for run in self._runs(blocks):
            out[start : start + run.numel()] = run
            start += run.numel()

    def scatter(self, blocks: Sequence[int], data: torch.Tensor) -> None:
        """Copy `data` (`[state_bytes]` uint8) into `blocks`."""
        start = 0
        for run in self._runs(blocks):
            run.copy_(data[start : start + run.numel()])
            start += run.numel()

    def copy(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy the state held in blocks `src` into blocks `dst` (`KVLayout.state_copies`)."""
        data = torch.empty(self.state_bytes, dtype=torch.uint8, device=self.tensors[0].device)
        self.gather(src, data)
        self.scatter(dst, data)

    def step(self, query_lens: list[int], seq_lens: list[int],
             state_blocks: list[list[int]]) -> PooledStates:
        return PooledStates(self, query_lens, seq_lens, state_blocks)


class PooledStates:
    """One step's `RecurrentStates` (kvbench.models.recurrent_states): the scheduled
    sequences' states gathered from their blocks; `store` writes them back."""

    def __init__(self, pool: StatePool, query_lens: list[int], seq_lens: list[int],
                 state_blocks: list[list[int]]) -> None:
        self.pool = pool
        self.query_lens = query_lens
        self.state_blocks = state_blocks
        device = pool.tensors[0].device
        self.bytes = torch.zeros(len(query_lens), pool.state_bytes, dtype=torch.uint8,
                                 device=device)
        for i, (query, total) in enumerate(zip(query_lens, seq_lens, strict=True)):
            if total > query:  # it has computed tokens before this step: its state goes on
                pool.gather(state_blocks[i], self.bytes[i])

    def read(self, layer: int) -> tuple[torch.Tensor, ...]:
        """Copies (a later `write` leaves them as they were)."""
        rows = self.bytes.shape[0]
        return tuple(
            self.bytes[:, offset : offset + math.prod(shape) * dtype.itemsize]
            .clone(memory_format=torch.contiguous_format).view(dtype).view(rows, *shape)
            for offset, shape, dtype in self.pool.places[layer])

    def write(self, layer: int, states: tuple[torch.Tensor, ...]) -> None:
        rows = self.bytes.shape[0]
        for (offset, shape, dtype), state in zip(self.pool.places[layer], states, strict=True):
            if state.dtype != dtype or tuple(state.shape) != (rows, *shape):
                raise ValueError(f"layer {layer}: a state {tuple(state.shape)} {state.dtype}, "
                                 f"expected {(rows, *shape)} {dtype}")
            size = math.prod(shape) * dtype.itemsize
            self.bytes[:, offset : offset + size] = (
                state.contiguous().view(rows, -1).view(torch.uint8))

    def store(self) -> None:
        """The step's states back into their blocks (after the forward)."""
        for i, blocks in enumerate(self.state_blocks):
            self.pool.scatter(blocks, self.bytes[i])

