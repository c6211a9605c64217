"""`HostKVTier`: the host copy of the KV arena's blocks, and the copies between the two.

The host pool has the arena's layout: one host tensor per arena tensor (a K and a V per layer,
one per latent-attention layer, `group_size` of each for `hybrid`'s pool), each `[host blocks,
block bytes]` of raw bytes, so bf16, fp16 and fp8 blocks move bit for bit. A block id names
the same slots in every arena tensor (`block * block_size ...`), so copying a block's rows of
every tensor moves every layer of it, whatever the KV groups. fp8 scales are per layer, never
per block, and fixed once set (`KVArena`): a block loaded back is read with the scales it was
written with, so they are not copied.

`store(gpu_blocks, host_blocks)` copies arena blocks to host blocks and `load(host_blocks,
gpu_blocks)` the other way; which ids, the strategy decides (executors never allocate). On
CUDA the host pool is pinned and the copies go on a side stream, after the work already queued
on the compute stream (a store reads KV the model wrote); `wait()` makes the compute stream
wait for them: the model executor calls it before the step's forward, so a load is in place
before any layer reads it and a store has read a block before the forward can overwrite it.
On the CPU the copies are plain and done when the call returns. Either way a transfer is one
copy per arena tensor and run of blocks consecutive in both pools (`block_runs`).

Every store and load is an NVTX range (`kv_store`, `kv_load`, payload: tokens moved) and its
seconds are measured: CUDA events on the side stream, wall time on the CPU.
`take_step_stats()` hands back what one step copied; `totals` is what the tier ever copied.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from kvbench.tracing import trace_range


@dataclass
class HostCopyStats:
    """Blocks, bytes and seconds of the stores (GPU to host) and loads (host to GPU)."""

    store_blocks: int = 0
    load_blocks: int = 0
    store_bytes: int = 0
    load_bytes: int = 0
    store_s: float = 0.0
    load_s: float = 0.0

    def add(self, other: HostCopyStats) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def block_runs(src: Sequence[int], dst: Sequence[int]) -> list[tuple[int, int, int]]:
    """(src start, dst start, length) runs of pairs consecutive on both sides: one copy each."""
    runs: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst, strict=True):
        if runs and s == runs[-1][0] + runs[-1][2] and d == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((s, d, 1))
    return runs


class HostKVTier:
    """`num_blocks` host blocks shaped as the arena's `block_size`-slot blocks."""

    def __init__(self, tensors: Sequence[torch.Tensor], num_blocks: int, block_size: int,
                 *, pin_memory: bool | None = None) -> None:
        if num_blocks < 1 or block_size < 1 or not tensors:
            raise ValueError("a host tier needs blocks, a block size and the arena's tensors")
        self.device = tensors[0].device
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_gpu_blocks = tensors[0].shape[0] // block_size
        # Each arena tensor as [GPU blocks, block bytes]: a block is one contiguous row.
        self.gpu_blocks = [
            t[: self.num_gpu_blocks * block_size].view(torch.uint8).reshape(self.num_gpu_blocks, -1)
            for t in tensors
        ]
        pin = self.device.type == "cuda" if pin_memory is None else pin_memory
        self.host_blocks = [
            torch.empty((num_blocks, g.shape[1]), dtype=torch.uint8, pin_memory=pin)
            for g in self.gpu_blocks
        ]
        self.block_bytes = sum(g.shape[1] for g in self.gpu_blocks)
        self.fragments_per_block = len(self.gpu_blocks)  # contiguous pieces of one block
        self.totals = HostCopyStats()
        self._step = HostCopyStats()
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def store(self, gpu_blocks: Sequence[int], host_blocks: Sequence[int]) -> None:
        """Copy arena blocks `gpu_blocks[i]` to host blocks `host_blocks[i]`."""
        self._copy("store", gpu_blocks, host_blocks)

    def load(self, host_blocks: Sequence[int], gpu_blocks: Sequence[int]) -> None:
        """Copy host blocks `host_blocks[i]` to arena blocks `gpu_blocks[i]`."""
        self._copy("load", host_blocks, gpu_blocks)

    def _copy(self, direction: str, src: Sequence[int], dst: Sequence[int]) -> None:
        if len(src) != len(dst):
            raise ValueError(f"{direction}: {len(src)} source blocks for {len(dst)} destinations")
        if not src:
            return
        gpu, host = (src, dst) if direction == "store" else (dst, src)
        self._check(gpu, self.num_gpu_blocks, "arena")
        self._check(host, self.num_blocks, "host")
        if direction == "load" and len(set(gpu)) != len(gpu):
            raise ValueError("load: an arena block named twice")
        if direction == "store" and len(set(host)) != len(host):
            raise ValueError("store: a host block named twice")
        n = len(src)
        name = "kv_store" if direction == "store" else "kv_load"
        with trace_range(name, blocks=n, tokens=n * self.block_size):
            if self._stream is None:
                start = time.perf_counter()
                self._copy_runs(direction, gpu, host, non_blocking=False)
                seconds = time.perf_counter() - start
            else:
                self._copy_cuda(direction, gpu, host)
                seconds = 0.0  # read from the events once they complete
        self._step.add(HostCopyStats(**{f"{direction}_blocks": n, f"{direction}_s": seconds,
                                        f"{direction}_bytes": n * self.block_bytes}))

    @staticmethod
    def _check(ids: Sequence[int], limit: int, pool: str) -> None:
        low, high = min(ids), max(ids)
        if low < 0 or high >= limit:
            raise IndexError(f"{pool} block {low if low < 0 else high} outside 0..{limit - 1}")

    def _copy_runs(self, direction: str, gpu: Sequence[int], host: Sequence[int],
                   non_blocking: bool) -> None:
        """One copy per run of blocks consecutive on both sides, per arena tensor: the
        granularity of the copy engines' descriptors (and of vLLM's, one per block and page
        tensor), which `kvbench.simulator.host_transfer` models."""
        runs = block_runs(gpu, host) if direction == "store" else block_runs(host, gpu)
        for g, h in zip(self.gpu_blocks, self.host_blocks, strict=True):
            if direction == "store":
                for s, d, n in runs:
                    h[d : d + n].copy_(g[s : s + n], non_blocking=non_blocking)
            else:
                for s, d, n in runs:
                    g[d : d + n].copy_(h[s : s + n], non_blocking=non_blocking)

    def _copy_cuda(self, direction: str, gpu: Sequence[int], host: Sequence[int]) -> None:
        stream = self._stream
        # after the compute stream's queued work: a store reads what the model wrote, a load
        # must not land before an earlier step's reads of its destination blocks
        stream.wait_stream(torch.cuda.current_stream(self.device))
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            self._copy_runs(direction, gpu, host, non_blocking=True)
            end.record(stream)
        self._events.append((direction, start, end))

    def wait(self) -> None:
        """Make the compute stream wait for every copy issued so far (no-op on the CPU)."""
        if self._stream is not None and self._events:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def take_step_stats(self) -> HostCopyStats:
        """What was copied since the last call (on CUDA, waiting for the copies to finish)."""
        step, self._step = self._step, HostCopyStats()
        for direction, start, end in self._events:
            end.synchronize()
            step.add(HostCopyStats(**{f"{direction}_s": start.elapsed_time(end) / 1e3}))
        self._events.clear()
        self.totals.add(step)
        return step
