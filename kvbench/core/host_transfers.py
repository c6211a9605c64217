"""`HostTransfers`: one step's KV copies between the GPU arena and a host tier, in blocks.

A strategy with a host tier (`prefix`, `hybrid-prefix` with `--kv-offload`) decides them and
hands them to the executor on the step's `KVLayout` (`host_transfers`); the executor performs
them (the model executor copies, the simulator charges the link's time) and reports each job
done (`Executor.finished_host_jobs`). Stores copy GPU blocks out after they were computed;
loads copy host blocks into freshly allocated GPU blocks before the sequences that wait on
them compute (vLLM's OffloadingConnector: `offloading/worker.py`, `start_kv_transfers`).
"""

from __future__ import annotations

from dataclasses import dataclass

# A host tier's eviction policies (`kvbench.strategies.host_tier`, `--kv-offload-policy`)
HOST_POLICIES = ("lru", "arc")

# What a preempted sequence loses (`--preemption-mode`): recompute it (vLLM v1's only mode),
# or swap: its KV kept in the host tier and loaded back (vLLM v0's; needs a host tier).
PREEMPTION_MODES = ("recompute", "swap")

# One block's copy: (allocation group, GPU block, host block). One group where every layer
# shares a table (`prefix`); `hybrid-prefix` copies each allocation group's blocks.
BlockCopy = tuple[int, int, int]


@dataclass(frozen=True)
class HostTransfers:
    """The step's store job (GPU -> host) and load job (host -> GPU); -1: none."""

    store_job: int = -1
    stores: tuple[BlockCopy, ...] = ()
    load_job: int = -1
    loads: tuple[BlockCopy, ...] = ()

    @property
    def jobs(self) -> tuple[int, ...]:
        return tuple(j for j in (self.store_job, self.load_job) if j >= 0)
