"""`HostTier`: the books of a host-memory (CPU) tier under a prefix cache, in blocks.

A host block holds one GPU block's KV (every layer, the same layout), named by the same
chained block hash as the GPU prefix cache (`prefix_index.py`; `hybrid-prefix`: the hash and
the allocation group). vLLM's OffloadingConnector keeps the same books
(`vllm/v1/kv_offload/cpu/manager.py`, `CPUOffloadingManager`): every host block is in
exactly one state,

- *free*: on the free list, no key;
- *storing*: a GPU -> host copy is in flight (vLLM's `ref_cnt == -1`, not `is_ready`): the
  key is known but not readable, and the block cannot be evicted;
- *ready*: readable; *idle* (evictable) while no load reads it and no preempted sequence
  pins it, *loading* while `readers` of host -> GPU copies are in flight (vLLM's
  `ref_cnt > 0`), *pinned* while `pins` swapped-out sequences hold it (`swap_out`).

`swap_out` is preemption by swap (`--preemption-mode swap`, vLLM v0's swap space): a
preempted sequence's computed blocks are stored (those the tier lacks) and pinned, never
evicted, until it is admitted again and loads them; its partial last block has no hash and
is kept under a private key (`swap_key`) that no lookup names, freed once nobody pins or
loads it. All or nothing: when the free and idle blocks cannot hold the new ones, nothing is
stored and the caller recomputes.

`offer` is vLLM's `prepare_store` and `lookup` of a storing key a miss (vLLM's `HIT_PENDING`);
what a store takes and evicts, `store_threshold` and the `lru` and `arc` policies (vLLM's
`eviction_policy`) are as docs/offload.md, "What it does", describes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from kvbench.core.host_transfers import HOST_POLICIES
from kvbench.strategies.block_residency import BlockResidency
from kvbench.strategies.prefix_index import BlockHash


class _LRU:
    """Idle ready keys, least recently used first."""

    def __init__(self, capacity: int) -> None:
        self.idle: OrderedDict[BlockHash, None] = OrderedDict()

    def inserted(self, key: BlockHash) -> None:
        """A store, or the key's last load, completed: idle and most recently used."""
        self.idle[key] = None

    released = inserted

    def used(self, key: BlockHash) -> None:
        """A load began, or a swapped-out sequence pins the key: busy (not evictable)."""
        self.idle.pop(key, None)

    pinned = forget = used

    def missed(self, key: BlockHash) -> None:
        return None

    def touch(self, key: BlockHash) -> None:
        """Offered again while held (a request used its prefix): most recently used."""
        if key in self.idle:
            self.idle.move_to_end(key)

    def victims(self, n: int, protected: set[BlockHash]) -> list[BlockHash] | None:
        out = []
        for key in self.idle:
            if len(out) == n:
                break
            if key not in protected:
                out.append(key)
        if len(out) < n:
            return None
        for key in out:
            del self.idle[key]
        return out


class _ARC:
    """Adaptive replacement (vLLM's `ARCCachePolicy`): T1 keys stored and not yet loaded
    again, T2 keys loaded again; B1, B2 the ghosts of keys evicted from each."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target_t1 = 0.0
        self.t1: OrderedDict[BlockHash, None] = OrderedDict()
        self.t2: OrderedDict[BlockHash, None] = OrderedDict()
        self.b1: OrderedDict[BlockHash, None] = OrderedDict()
        self.b2: OrderedDict[BlockHash, None] = OrderedDict()
        self.busy: set[BlockHash] = set()  # keys loaded or pinned (in T1 or T2, not evictable)

    def missed(self, key: BlockHash) -> None:
        """A store of a key not held: a ghost hit moves the target (vLLM's `on_store_miss`)."""
        if key in self.b1:
            self.target_t1 = min(self.target_t1 + max(1.0, len(self.b2) / len(self.b1)),
                                 float(self.capacity))
        elif key in self.b2:
            self.target_t1 = max(self.target_t1 - max(1.0, len(self.b1) / len(self.b2)), 0.0)

    def inserted(self, key: BlockHash) -> None:
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def touch(self, key: BlockHash) -> None:
        """Used again (offered while held, or loaded): to T2's most recent end (vLLM moves a
        request's reused keys there when it finishes)."""
        if self.t1.pop(key, 0) is None:
            self.t2[key] = None
        elif key in self.t2:
            self.t2.move_to_end(key)

    def used(self, key: BlockHash) -> None:
        """A load begins: the key is used again and busy until it ends."""
        self.busy.add(key)
        self.touch(key)

    def pinned(self, key: BlockHash) -> None:
        self.busy.add(key)

    def released(self, key: BlockHash) -> None:
        self.busy.discard(key)

    def victims(self, n: int, protected: set[BlockHash]) -> list[BlockHash] | None:
        def candidates(entries: OrderedDict[BlockHash, None]):
            return (k for k in entries if k not in self.busy and k not in protected)

        t1_left = len(self.t1)
        it1, it2 = candidates(self.t1), candidates(self.t2)
        chosen: list[tuple[BlockHash, bool]] = []
        for _ in range(n):
            key = None
            if t1_left >= int(self.target_t1):
                key = next(it1, None)
                if key is not None:
                    chosen.append((key, True))
                    t1_left -= 1
                    continue
            key = next(it2, None)
            if key is not None:
                chosen.append((key, False))
                continue
            key = next(it1, None)
            if key is None:
                return None
            chosen.append((key, True))
            t1_left -= 1
        for key, from_t1 in chosen:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghost in (self.b1, self.b2):
            while len(ghost) > self.capacity:
                ghost.popitem(last=False)
        return [key for key, _ in chosen]

    def forget(self, key: BlockHash) -> None:
        self.t1.pop(key, None)
        self.t2.pop(key, None)
        self.busy.discard(key)


def swap_key(seq_id: int) -> BlockHash:
    """The private key of a swapped-out sequence's partial last block: 12 bytes, never a
    block hash (16) nor another sequence's."""
    return b"swap" + seq_id.to_bytes(8, "little", signed=True)


def is_swap_key(key: object) -> bool:
    return isinstance(key, bytes) and len(key) == 12 and key.startswith(b"swap")


class HostTier:
    """`num_blocks` host blocks keyed by block hash; see the module docstring."""

    def __init__(self, num_blocks: int, policy: str = "lru", store_threshold: int = 0) -> None:
        if num_blocks < 1:
            raise ValueError(f"a host tier needs at least one block, got {num_blocks}")
        if policy not in HOST_POLICIES:
            raise ValueError(f"host tier policy {policy!r}: choose from {HOST_POLICIES}")
        self.num_blocks = num_blocks
        self.policy = _LRU(num_blocks) if policy == "lru" else _ARC(num_blocks)
        self.store_threshold = store_threshold
        self._offers: dict[BlockHash, int] = {}  # offers of keys below the threshold
        self._free = list(range(num_blocks - 1, -1, -1))  # popped from the end: 0 first
        self.block_of: dict[BlockHash, int] = {}
        self.key_of: dict[int, BlockHash] = {}
        self.storing: set[int] = set()  # blocks with a store in flight
        self.readers: dict[int, int] = {}  # ready blocks being loaded -> loads in flight
        self.pins: dict[int, int] = {}  # blocks swapped-out sequences hold -> how many
        self.private: set[int] = set()  # blocks under a `swap_key`, freed once let go
        # counters (`stats`)
        self.stored_blocks = 0
        self.loaded_blocks = 0
        self.evictions = 0
        self.refused_blocks = 0  # offered, not stored: no block could be freed
        self.skipped_blocks = 0  # offered below the store threshold
        # A host block is allocated when its store begins, accessed when a load of it
        # begins (a host hit), evicted by a store that needs it: an offer's or a swap-out's.
        self.residency = BlockResidency(num_blocks)

    # State ------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._free)

    def ready(self, key: BlockHash) -> int | None:
        """The host block holding `key`, readable now; None: absent or still being stored."""
        block = self.block_of.get(key)
        if block is None or block in self.storing:
            return None
        return block

    def lookup(self, keys: Iterable[BlockHash]) -> list[int]:
        """Host blocks of the leading run of `keys` that are readable now."""
        out = []
        for key in keys:
            block = self.ready(key)
            if block is None:
                break
            out.append(block)
        return out

    # Stores -----------------------------------------------------------------------------

    def offer(self, keys: Sequence[BlockHash]) -> list[int | None]:
        """Store `keys` (vLLM's `prepare_store`): the host block each new key takes (its copy
        now in flight), None for a key held already or not stored."""
        out: list[int | None] = [None] * len(keys)
        new: list[int] = []
        for i, key in enumerate(keys):
            block = self.block_of.get(key)
            if block is not None:
                if block not in self.storing:
                    self.policy.touch(key)
                continue
            if self.store_threshold >= 2:
                seen = self._offers.get(key, 0) + 1
                if seen < self.store_threshold:
                    self._offers[key] = seen
                    self.skipped_blocks += 1
                    continue
                self._offers.pop(key, None)
            self.policy.missed(key)
            new.append(i)
        if not new:
            return out
        if not self._make_room(len(new), keys):
            self.refused_blocks += len(new)
            return out
        for i in new:
            out[i] = self._begin_store(keys[i])
        return out

    def _make_room(self, n: int, keys: Sequence[BlockHash]) -> bool:
        """At least `n` free blocks, evicting the policy's victims (none of `keys`); False,
        nothing evicted: too few victims."""
        short = n - len(self._free)
        if short <= 0:
            return True
        victims = self.policy.victims(short, set(keys))
        if victims is None:
            return False
        for key in victims:
            block = self.block_of.pop(key)
            del self.key_of[block]
            self._free.append(block)
            self.residency.evicted(block)
        self.evictions += len(victims)
        return True

    def _begin_store(self, key: BlockHash) -> int:
        block = self._free.pop()
        self.block_of[key] = block
        self.key_of[block] = key
        self.storing.add(block)
        self.residency.allocated(block)
        return block

    def stored(self, blocks: Iterable[int]) -> None:
        """Stores into `blocks` completed: they are ready (and idle)."""
        for block in blocks:
            self.storing.remove(block)
            key = self.key_of[block]
            self.policy.inserted(key)
            if block in self.pins:
                self.policy.pinned(key)
            elif block in self.private:  # let go while its copy ran
                self._let_go(block)
            self.stored_blocks += 1

    # Loads ------------------------------------------------------------------------------

    def begin_load(self, blocks: Sequence[int]) -> None:
        """Host -> GPU copies of `blocks` begin: none may be evicted until `loaded`."""
        for block in blocks:
            if block in self.storing or block not in self.key_of:
                raise ValueError(f"host block {block} is not ready to load")
            n = self.readers.get(block, 0)
            if not n:
                self.policy.used(self.key_of[block])
            self.readers[block] = n + 1
        self.residency.accessed(blocks)

    def loaded(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            n = self.readers[block] - 1
            if n:
                self.readers[block] = n
            else:
                del self.readers[block]
                if block not in self.pins:
                    self._let_go(block)
            self.loaded_blocks += 1

    # Swap space -------------------------------------------------------------------------

    def swap_out(self, keys: Sequence[BlockHash]) -> list[int | None] | None:
        """Store and pin `keys` for a preempted sequence (its full blocks' hashes, then a
        `swap_key` for a partial last block): the host block each key not held takes (its
        copy now in flight), None for a key held already (pinned where it is). None: the
        tier cannot hold them; nothing changed."""
        new = [i for i, key in enumerate(keys) if key not in self.block_of]
        if not self._make_room(len(new), keys):
            return None
        out: list[int | None] = [None] * len(keys)
        for i in new:
            self.policy.missed(keys[i])
            out[i] = self._begin_store(keys[i])
            if is_swap_key(keys[i]):
                self.private.add(out[i])
        for key in keys:
            block = self.block_of[key]
            n = self.pins.get(block, 0)
            self.pins[block] = n + 1
            if not n and block not in self.storing and block not in self.readers:
                self.policy.pinned(key)
        return out

    def unpin(self, blocks: Iterable[int]) -> None:
        """Swapped-out sequences let `blocks` go (admitted again: after their loads began)."""
        for block in blocks:
            n = self.pins[block] - 1
            if n:
                self.pins[block] = n
                continue
            del self.pins[block]
            if block not in self.readers and block not in self.storing:
                self._let_go(block)

    def _let_go(self, block: int) -> None:
        """Nobody loads or pins a ready block now: idle, or freed if it is private."""
        key = self.key_of[block]
        if block not in self.private:
            self.policy.released(key)
            return
        self.private.remove(block)
        self.policy.forget(key)
        del self.block_of[key], self.key_of[block]
        self._free.append(block)

    def stats(self) -> dict[str, float]:
        return {
            "host_blocks": self.num_blocks,
            "host_stored_blocks": self.stored_blocks,
            "host_loaded_blocks": self.loaded_blocks,
            "host_evictions": self.evictions,
            "host_refused_blocks": self.refused_blocks,
            "host_threshold_skipped_blocks": self.skipped_blocks,
            "host_resident_blocks": len(self.block_of),
        }

    def reset_stats(self) -> None:
        self.stored_blocks = self.loaded_blocks = self.evictions = 0
        self.refused_blocks = self.skipped_blocks = 0
