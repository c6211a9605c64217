"""`ResidencyBooks`: what a prefix-caching strategy records of its blocks' residency.

The GPU cache's and, with a host tier, the host tier's `BlockResidency` (lifetime, idle time
before eviction, reuse gaps: vLLM's KV cache residency metrics), and the reuse distances of
the prefix lookups (`ReuseDistance`: the hit rate an LRU cache of any size would reach),
with the sizes a reader compares them to. `kvbench/results/residency_figures.py` turns them
into a run's summary keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvbench.strategies.block_residency import BlockResidency
from kvbench.strategies.reuse_distance import ReuseDistance


@dataclass(frozen=True)
class ResidencyBooks:
    gpu: BlockResidency
    host: BlockResidency | None  # None: no host tier
    reuse: ReuseDistance | None  # None: the strategy keeps no reuse distances
    gpu_blocks: int  # the GPU cache's blocks, in the reuse distances' unit
    host_blocks: int | None
    block_size: int

    def tiers(self) -> list[BlockResidency]:
        return [self.gpu] if self.host is None else [self.gpu, self.host]

    def set_clock(self, clock: Callable[[], float]) -> None:
        for tier in self.tiers():
            tier.clock = clock

    def restart(self) -> None:
        """The run proper starts (after warm-up), its clock from 0 where it stands now: the
        events so far are forgotten, the blocks' times kept on the new clock."""
        origin = self.gpu.clock()
        for tier in self.tiers():
            tier.rebase(origin)
        if self.reuse is not None:
            self.reuse.reset()
