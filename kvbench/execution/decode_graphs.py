"""CUDA graphs for decode steps, one per padded batch size (vLLM's scheme).

A decode-only step of `n` sequences replays the graph captured for the smallest capture size
`>= n` over static input buffers: the eager forward's kernels and arguments, so each real row
computes what eager mode computes; padding rows write their K/V to slot -1 (the KV write skips
it) and read one slot. The decode kernel's split-K factor is chosen from the real batch as in
eager mode and is part of the graph's key, so every row is reduced in eager mode's order.
CUDA with the Triton backend only (the torch reference ops read lengths on the host).

Every graph is captured before the run is measured (`capture_all`, as vLLM captures at
startup): a capture synchronizes and empties caches, which would inflate a measured step.
`capture_plan` lists the keys a run can meet (every capture size with every split count the
heuristic gives for it at any context up to `max_model_len`). An fp8 cache whose scales come
from its first write is captured at the first decode step after it (`late_captures`).
Eager and graph tokens are compared on a GPU by `scripts/gpu_check.sh`.
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


# choose_splits(num_seqs, num_kv_heads, max_seq_len, device) -> split count
ChooseSplits = Callable[[int, int, int, torch.device], int]


def capture_plan(sizes: list[int], num_kv_heads: int, max_model_len: int,
                 choose_splits: ChooseSplits, device: torch.device) -> list[tuple[int, int]]:
    """Every (padded size, split count) a decode step of up to `sizes[-1]` sequences with
    contexts up to `max_model_len` can need, sorted.

    The split count is non-decreasing in the context length at a fixed batch (longer contexts
    never split less), so each batch's counts are found by bisecting the context range.
    """
    plan: set[tuple[int, int]] = set()
    smaller = 0
    for size in sizes:
        for num_seqs in range(smaller + 1, size + 1):
            def splits(length: int, n: int = num_seqs) -> int:
                return choose_splits(n, num_kv_heads, length, device)

            plan.update((size, s) for s in _values(splits, 1, max(1, max_model_len)))
        smaller = size
    return sorted(plan)


def _values(f: Callable[[int], int], lo: int, hi: int) -> set[int]:
    """The values of a non-decreasing `f` over `[lo, hi]`."""
    a, b = f(lo), f(hi)
    if a == b:
        return {a}
    if hi - lo <= 1:
        return {a, b}
    mid = (lo + hi) // 2
    return _values(f, lo, mid) | _values(f, mid, hi)


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
        self.late_captures = 0  # graphs captured during the run, not by `capture_all`
        self._plan_max_model_len: int | None = None  # set by `capture_all`

    def capture_all(self, layout_kind: str, block_size: int, max_model_len: int) -> int:
        """Capture every graph of `capture_plan` for steps of this layout; how many were
        captured (0 while an fp8 cache waits for its scales: then they come when needed)."""
        self._size_tables(layout_kind, block_size)
        self._plan_max_model_len = max_model_len
        if not self.fp8_ready():
            return 0
        return self._capture_plan()

    def _capture_plan(self) -> int:
        plan = capture_plan(self.sizes, self.num_kv_heads, self._plan_max_model_len,
                            self._choose_splits, self.device)
        for size, splits in plan:
            if (size, splits) not in self.graphs:
                self._pad(0, size)
                self.graphs[(size, splits)] = self._capture(size, splits)
        return len(plan)

    def _size_tables(self, layout_kind: str, block_size: int) -> None:
        if self.tables is None:
            block_size = block_size if layout_kind == "paged" else 0
            width = -(-self.num_slots // block_size) if block_size else 1
            self.tables = torch.zeros((self.sizes[-1], width), dtype=torch.int32,
                                      device=self.device)

    def padded_size(self, num_seqs: int) -> int | None:
        i = bisect.bisect_left(self.sizes, num_seqs)
        return self.sizes[i] if i < len(self.sizes) else None

    def can_run(self, batch: StepBatch, idx: DeviceIndices) -> bool:
        if batch.num_prefill_seqs or self.padded_size(len(batch.layout.seq_lens)) is None:
            return False
        self._size_tables(batch.layout.kind, batch.layout.block_size)
        # A table per allocation group (a window group's ring too) is not what was captured.
        return (idx.group_tables is None and idx.tables.shape[1] <= self.tables.shape[1]
                and self.fp8_ready())

    def run(self, batch: StepBatch, idx: DeviceIndices) -> torch.Tensor:
        """Hidden states `[n, hidden]` of a decode-only step (`can_run` was True)."""
        n = len(batch.layout.seq_lens)
        padded = self.padded_size(n)
        splits = self._choose_splits(n, self.num_kv_heads, max(batch.layout.seq_lens),
                                     self.device)
        key = (padded, splits)
        if key not in self.graphs:
            before = len(self.graphs)
            if self._plan_max_model_len is not None:  # deferred until fp8 scales existed
                self._capture_plan()
            if key not in self.graphs:
                self._pad(0, padded)
                self.graphs[key] = self._capture(padded, splits)
            self.late_captures += len(self.graphs) - before
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
