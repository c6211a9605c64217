"""CUDA graphs for decode steps, one per padded batch size (vLLM's scheme).

A decode-only step of `n` sequences replays the graph captured for the smallest capture size
`>= n` over static input buffers: the same kernels with the same arguments as the eager
forward, so each real row computes what eager mode computes; padding rows write their K/V to
slot -1 (the KV write skips it) and read one slot. The split-K factor of the decode kernel is
chosen from the real batch as eager mode chooses it and is part of the graph's key, so every
row is reduced in the same order as in eager mode. Used only on CUDA with the Triton backend
(the torch reference ops read lengths on the host); everything else runs eagerly.

Unverified without a GPU: `scripts/gpu_check.sh` is where eager and graph tokens are compared.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import torch

from kvbench.core.step_batch import StepBatch
from kvbench.execution.step_inputs import DeviceIndices


def capture_sizes(max_num_seqs: int) -> list[int]:
    sizes = [s for s in (1, 2, 4) if s < max_num_seqs]
    sizes += list(range(8, max_num_seqs, 8))
    return sizes + [max_num_seqs]


# forward(input_ids, positions, idx, decode_extra) -> hidden states [T, hidden]
Forward = Callable[[torch.Tensor, torch.Tensor, DeviceIndices, dict], torch.Tensor]


class DecodeGraphs:
    """Captured decode forwards keyed by (padded batch size, decode split factor)."""

    def __init__(self, forward: Forward, device: torch.device, max_num_seqs: int,
                 num_slots: int, num_kv_heads: int, fp8_ready: Callable[[], bool]) -> None:
        # triton: only where CUDA graphs are captured
        from kvbench.kernels.triton_ops import choose_num_splits

        self._choose_splits = choose_num_splits
        self.forward = forward
        self.device = device
        self.sizes = capture_sizes(max_num_seqs)
        self.num_slots = num_slots
        self.num_kv_heads = num_kv_heads
        self.fp8_ready = fp8_ready
        n = max_num_seqs
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.long, device=device)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.tables: torch.Tensor | None = None  # [n, max blocks], sized at the first step
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None

    def padded_size(self, num_seqs: int) -> int | None:
        i = bisect.bisect_left(self.sizes, num_seqs)
        return self.sizes[i] if i < len(self.sizes) else None

    def can_run(self, batch: StepBatch, idx: DeviceIndices) -> bool:
        if batch.num_prefill_seqs or self.padded_size(len(batch.layout.seq_lens)) is None:
            return False
        if self.tables is None:
            block_size = batch.layout.block_size if batch.layout.kind == "paged" else 0
            width = -(-self.num_slots // block_size) if block_size else 1
            self.tables = torch.zeros((self.sizes[-1], width), dtype=torch.int32,
                                      device=self.device)
        return idx.tables.shape[1] <= self.tables.shape[1] and self.fp8_ready()

    def run(self, batch: StepBatch, idx: DeviceIndices) -> torch.Tensor:
        """Hidden states `[n, hidden]` of a decode-only step (`can_run` was True)."""
        n = len(batch.layout.seq_lens)
        padded = self.padded_size(n)
        splits = self._choose_splits(n, self.num_kv_heads, max(batch.layout.seq_lens),
                                     self.device)
        key = (padded, splits)
        if key not in self.graphs:
            self._pad(0, padded)
            self.graphs[key] = self._capture(padded, splits)
        graph, out = self.graphs[key]
        self._pad(n, padded)
        self.input_ids[:n].copy_(idx.input_ids)
        self.positions[:n].copy_(idx.positions)
        self.slot_mapping[:n].copy_(idx.slot_mapping)
        self.seq_lens[:n].copy_(idx.seq_lens)
        self.tables[:n, : idx.tables.shape[1]].copy_(idx.tables)
        graph.replay()
        return out[:n]

    def _pad(self, start: int, end: int) -> None:
        """Rows `[start, end)` become padding: no KV written, one slot read."""
        self.input_ids[start:end] = 0
        self.positions[start:end] = 0
        self.slot_mapping[start:end] = -1
        self.seq_lens[start:end] = 1
        self.tables[start:end] = 0

    def _static_indices(self, size: int) -> DeviceIndices:
        return DeviceIndices(
            input_ids=self.input_ids[:size], positions=self.positions[:size],
            sample_rows=self.input_ids[:0], slot_mapping=self.slot_mapping[:size],
            seq_lens=self.seq_lens[:size],
            query_start_loc=torch.zeros(1, dtype=torch.int32, device=self.device),
            tables=self.tables[:size], num_prefill_seqs=0, num_prefill_tokens=0,
        )

    def _capture(self, size: int, splits: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        idx = self._static_indices(size)
        extra = {"num_splits": splits}
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # compile and warm the kernels outside the capture
            self.forward(idx.input_ids, idx.positions, idx, extra)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.forward(idx.input_ids, idx.positions, idx, extra)
        self.pool = graph.pool()
        return graph, out
