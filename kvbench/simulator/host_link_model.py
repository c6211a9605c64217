"""`HostLinkModel`: when a simulated host tier's copies end, on the GPU's host link.

As vLLM's OffloadingConnector (`kv_connector/v1/offloading/worker.py`, `start_kv_transfers`)
submits a step's stores and loads at the step's start, each direction on its own stream:
each direction is a queue on one GPU's link (`HostLink`: under tensor parallelism every GPU
moves its own shard at once), a job starting with its step once the direction's previous job
is done and taking `transfer_seconds`. A load delays only the sequences waiting for it (the
engine asks `finished` at every step's end); a step ends no sooner than the stores started
with it (docs/offload.md, "Where kvbench differs from vLLM's connector").
"""

from __future__ import annotations

import heapq

from kvbench.core.host_transfers import HostTransfers
from kvbench.simulator.host_link import HostLink
from kvbench.simulator.host_transfer import CROSS_LAYER_FRAGMENTS, transfer_seconds


class HostLinkModel:
    """Both directions of one GPU's host link, each a queue of jobs."""

    def __init__(self, link: HostLink, block_bytes: int,
                 fragments_per_block: int = CROSS_LAYER_FRAGMENTS) -> None:
        self.link = link
        self.block_bytes = block_bytes  # one GPU's bytes of one block (every layer)
        self.fragments_per_block = fragments_per_block
        self._free_s = {"load": 0.0, "store": 0.0}  # when each direction's queue drains
        self._ends: list[tuple[float, int]] = []  # (end, job), a heap
        self.busy_s = {"load": 0.0, "store": 0.0}
        self.blocks = {"load": 0, "store": 0}

    def _queue(self, direction: str, job: int, num_blocks: int, now_s: float) -> float:
        took = transfer_seconds(self.link, direction, num_blocks, self.block_bytes,
                                self.fragments_per_block)
        end = max(now_s, self._free_s[direction]) + took
        self._free_s[direction] = end
        self.busy_s[direction] += took
        self.blocks[direction] += num_blocks
        heapq.heappush(self._ends, (end, job))
        return end

    def start(self, transfers: HostTransfers, now_s: float) -> float:
        """Queue the step's jobs at `now_s`; returns when its stores end (`now_s`: none)."""
        store_end = now_s
        if transfers.stores:
            store_end = self._queue("store", transfers.store_job, len(transfers.stores), now_s)
        if transfers.loads:
            self._queue("load", transfers.load_job, len(transfers.loads), now_s)
        return store_end

    def finished(self, now_s: float) -> list[int]:
        """Jobs that ended by `now_s`, taken off the queue."""
        done = []
        ends = self._ends
        while ends and ends[0][0] <= now_s:
            done.append(heapq.heappop(ends)[1])
        return done

    def next_end_s(self) -> float:
        """When the next job in flight ends (now where none is)."""
        return self._ends[0][0] if self._ends else 0.0

    def restart(self) -> None:
        """The clock goes back to zero (after a warm-up) with no job in flight: the queues
        drained then are free from the new zero on."""
        if self._ends:
            raise RuntimeError("host link restarted with jobs in flight")
        self._free_s = {"load": 0.0, "store": 0.0}

    def stats(self) -> dict[str, float]:
        return {
            "host_link_load_busy_s": self.busy_s["load"],
            "host_link_store_busy_s": self.busy_s["store"],
            "host_loaded_bytes": self.blocks["load"] * self.block_bytes,
            "host_stored_bytes": self.blocks["store"] * self.block_bytes,
        }
