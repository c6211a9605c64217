"""`HostOffload`: what a prefix-caching strategy does with a host tier, between steps.

The strategy calls it as vLLM's OffloadingConnector scheduler does
(`kv_connector/v1/offloading/scheduler.py`; docs/offload.md, "What it does"): `offer` whenever
it names full computed blocks (and at admission, for a prefix hit's blocks); `load` at an
admission whose GPU prefix hit continues in the tier (the sequence waits, `loading`, and its
blocks are named only once they land); `take` when the step's layout is built (the copies
decided since the last one, as one store job and one load job); `land` when the executor
reports jobs done. Blocks in flight are the tier's books: a stored block stays unreadable
until its job is done, a loaded one unevictable. A sequence freed while it waits drops its
claim; its job still ends and releases the host blocks.

Preemption by swap (docs/offload.md): `swap_out` stores and pins a victim's computed blocks
(its partial last block under a private key), `swap_ready` says when their stores are done,
and `swap_in` lets the pins go once the re-admission's loads have begun.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvbench.core.host_transfers import BlockCopy, HostTransfers
from kvbench.strategies.host_tier import HostTier, swap_key
from kvbench.strategies.prefix_index import BlockHash, CachingBlockPool

# (allocation group, GPU block, its key): a block loaded for a sequence, named when it lands
# (None: a swapped-out sequence's partial last block, never named)
Landing = tuple[int, int, BlockHash | None]
# The counters `stats` reports, each as `host_<name>`: host blocks a prefix hit loaded and their
# tokens; preemptions by swap, the blocks they kept in the tier (pinned) and of those the ones
# copied then (the rest were held already), those that recomputed (`swap_out` False); and
# re-admissions by swap-in with the host blocks they loaded.
COUNTERS = ("hit_blocks", "hit_tokens", "swap_out_requests", "swap_out_blocks",
            "swap_out_copied_blocks", "swap_fallbacks", "swap_in_requests", "swap_in_blocks")


@dataclass(slots=True)
class Swap:
    """A swapped-out sequence's host blocks (its full blocks', then its partial last
    block's, `partial`; -1: none), pinned, and the tokens they hold."""

    blocks: list[int]
    tokens: int
    partial: int


class HostOffload:
    """The host tier's transfers and the sequences that wait on loads."""

    def __init__(self, tier: HostTier) -> None:
        self.tier = tier
        self._stores: list[BlockCopy] = []
        self._loads: list[BlockCopy] = []
        self._landing: dict[int, list[Landing]] = {}  # seq_id -> blocks its next job loads
        self._next_job = 0
        self._store_jobs: dict[int, list[int]] = {}  # job -> host blocks
        self._load_jobs: dict[int, tuple[list[int], list[int]]] = {}  # job -> (host, seqs)
        # GPU blocks a load still writes whose sequence let them go: the strategy keeps a
        # reference on each until the job ends (`land` hands them back), so no other
        # sequence takes a block a copy is landing in. job (-1: not taken yet) -> blocks
        self.pinned: dict[int, list[int]] = {}
        self.loading: dict[int, list[Landing]] = {}  # waiting seq_id -> its blocks to name
        self.swaps: dict[int, Swap] = {}  # swapped-out seq_id -> its pinned host blocks
        self.swap_ins: list[int] = []  # seq_ids admitted by swap-in, for the engine to time
        self.hit_blocks = self.hit_tokens = 0  # (`COUNTERS`)
        self.swap_out_requests = self.swap_out_blocks = self.swap_out_copied_blocks = 0
        self.swap_fallbacks = self.swap_in_requests = self.swap_in_blocks = 0

    def offer(self, group: int, blocks: Sequence[int], keys: Sequence[BlockHash]) -> None:
        """Full computed GPU `blocks` named `keys`: store the ones the host tier lacks."""
        for gpu, host in zip(blocks, self.tier.offer(keys), strict=True):
            if host is not None:
                self._stores.append((group, gpu, host))

    def swap_out(self, seq_id: int, group: int, gpu_blocks: Sequence[int],
                 keys: Sequence[BlockHash], tokens: int) -> bool:
        """A preempted sequence's computed `gpu_blocks` (its full blocks named `keys`, and a
        partial last block after them where `tokens` is not a whole number of blocks) kept
        in the tier until `swap_in`; False: the tier cannot hold them (counted; recompute)."""
        partial = len(gpu_blocks) > len(keys)
        names = [*keys, swap_key(seq_id)] if partial else list(keys)
        hosts = self.tier.swap_out(names)
        if hosts is None:
            self.swap_fallbacks += 1
            return False
        copied = 0
        for gpu, host in zip(gpu_blocks, hosts, strict=True):
            if host is not None:
                self._stores.append((group, gpu, host))
                copied += 1
        blocks = [self.tier.block_of[k] for k in names]
        self.swaps[seq_id] = Swap(blocks, tokens, blocks[-1] if partial else -1)
        self.swap_out_requests += 1
        self.swap_out_blocks += len(blocks)
        self.swap_out_copied_blocks += copied
        return True

    def swap_ready(self, seq_id: int) -> bool:
        """Whether a swapped-out sequence's stores are done (it may be admitted again)."""
        storing = self.tier.storing
        return not any(b in storing for b in self.swaps[seq_id].blocks)

    def swap_in(self, seq_id: int, loaded_blocks: int) -> None:
        """The sequence was admitted again, its loads begun (`loaded_blocks` host blocks):
        its pins go."""
        swap = self.swaps.pop(seq_id)
        self.tier.unpin(swap.blocks)
        self.swap_in_requests += 1
        self.swap_in_blocks += loaded_blocks
        self.swap_ins.append(seq_id)

    def load(self, seq_id: int, group: int, gpu_blocks: Sequence[int],
             host_blocks: Sequence[int], keys: Sequence[BlockHash | None],
             hit: bool = True) -> None:
        """Copy `host_blocks` into the sequence's fresh `gpu_blocks`; it waits until done.
        A block whose key is None is not named in the GPU cache when it lands. `hit`: a
        prefix hit's blocks (`host_hit_blocks`), not a swapped-out partial block."""
        if len(host_blocks) != len(gpu_blocks):
            raise ValueError("a load needs one GPU block for each host block")
        self.tier.begin_load(host_blocks)
        self._loads.extend(zip([group] * len(host_blocks), gpu_blocks, host_blocks,
                               strict=False))
        landing = self._landing.setdefault(seq_id, [])
        landing.extend((group, g, k) for g, k in zip(gpu_blocks, keys, strict=True))
        self.loading[seq_id] = landing
        if hit:
            self.hit_blocks += len(host_blocks)

    def take(self) -> HostTransfers | None:
        """The copies decided since the last call, as this step's jobs."""
        if not self._stores and not self._loads:
            return None
        store_job = load_job = -1
        if self._stores:
            store_job = self._next_job
            self._next_job += 1
            self._store_jobs[store_job] = [h for _, _, h in self._stores]
        if self._loads:
            load_job = self._next_job
            self._next_job += 1
            self._load_jobs[load_job] = ([h for _, _, h in self._loads], list(self._landing))
            self._landing = {}
            if -1 in self.pinned:
                self.pinned[load_job] = self.pinned.pop(-1)
        out = HostTransfers(store_job, tuple(self._stores), load_job, tuple(self._loads))
        self._stores, self._loads = [], []
        return out

    def land(self, jobs: Iterable[int], pool: CachingBlockPool) -> list[int]:
        """Jobs done: stored blocks become readable, loaded ones evictable again. The blocks
        loaded for the sequences that waited on them (and still do) join `pool`'s prefix
        cache under their keys and the GPU blocks pinned for them (`drop`) go back to it;
        returns those sequences."""
        landed: list[int] = []
        names: list[Landing] = []
        unpinned: list[int] = []
        for job in jobs:
            unpinned.extend(self.pinned.pop(job, ()))
            stored = self._store_jobs.pop(job, None)
            if stored is not None:
                self.tier.stored(stored)
                continue
            host, seqs = self._load_jobs.pop(job)
            self.tier.loaded(host)
            for seq_id in seqs:
                blocks = self.loading.pop(seq_id, None)
                if blocks is not None:
                    landed.append(seq_id)
                    names.extend(blocks)
        for _, block, key in names:
            if key is not None:
                pool.register(block, key)
        for block in unpinned:
            pool.release(block)
        return landed

    def drop(self, seq_id: int) -> list[int]:
        """The sequence gives its blocks back while it waits: nothing is named for it, and
        the GPU blocks its load writes are returned, for the strategy to pin (`pinned`)."""
        blocks = [block for _, block, _ in self.loading.pop(seq_id)]
        if self._landing.pop(seq_id, None) is not None:
            job = -1
        else:  # off the job's waiters: readmitted before it ends, it waits on a new job only
            job = next(j for j, (_, seqs) in self._load_jobs.items() if seq_id in seqs)
            self._load_jobs[job][1].remove(seq_id)
        self.pinned.setdefault(job, []).extend(blocks)
        return blocks

    @property
    def jobs_in_flight(self) -> int:
        return len(self._store_jobs) + len(self._load_jobs)

    def is_whole(self) -> bool:
        """No sequence waits and no load is left (stores may still be in flight at a run's
        end: their blocks are the tier's, in the `storing` state)."""
        return (not self.loading and not self._loads and not self._load_jobs
                and not self.tier.readers and not self.pinned and not self.swaps
                and not self.tier.pins)

    def stats(self) -> dict[str, float]:
        return {**self.tier.stats(), **{f"host_{name}": getattr(self, name) for name in COUNTERS}}

    def reset_stats(self) -> None:
        self.tier.reset_stats()
        for name in COUNTERS:
            setattr(self, name, 0)
