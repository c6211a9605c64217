"""Block-level prefix cache: chained block hashes and a block pool that keeps freed blocks.

A *full* block is named by `block_hash(parent, tokens)`: a digest of its parent block's hash
and its own token ids. The chain starts from `root_hash(namespace)` (model, dtype, KV-cache
dtype), so caches of different configurations never collide. Equal hashes mean equal token
prefixes, hence equal KV.

`CachingBlockPool` is a `BlockPool` whose freed blocks that hold a hash are not returned to
the free list: they stay *evictable* (reusable on a later hit) in least-recently-freed order,
and are evicted (their hash dropped) only when a fresh block is needed and the free list is
empty.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from kvbench.strategies.block_pool import BlockPool
from kvbench.strategies.block_residency import BlockResidency

BlockHash = bytes


def root_hash(namespace: str) -> BlockHash:
    """The parent hash of a sequence's first block."""
    return hashlib.blake2b(namespace.encode(), digest_size=16, person=b"kvbench-root").digest()


def block_hash(parent: BlockHash, tokens: Sequence[int]) -> BlockHash:
    """The hash of a full block: its parent's hash and its token ids (128-bit, collision-free
    in practice)."""
    h = hashlib.blake2b(parent, digest_size=16, person=b"kvbench-block")
    h.update(array("q", tokens).tobytes())
    return h.digest()


def state_hash(h: BlockHash, page: int) -> BlockHash:
    """The name of page `page` of the recurrent-state checkpoint taken where the block of hash
    `h` ends (a state-space hybrid's prefix cache): kept in the same index as the blocks, so
    a checkpoint is evicted like any cached block."""
    g = hashlib.blake2b(h, digest_size=16, person=b"kvbench-state")
    g.update(page.to_bytes(4, "little"))
    return g.digest()


def extend_chain(chain: list[BlockHash], root: BlockHash, tokens: Sequence[int],
                 block_size: int, blocks: int | None = None) -> list[BlockHash]:
    """`chain` (the hashes of a sequence's first full blocks) grown to every full block of
    `tokens` (to the first `blocks`), in place: a sequence's tokens only ever grow, so each
    block is hashed once."""
    end = len(tokens) // block_size if blocks is None else blocks
    while len(chain) < end:
        i = len(chain)
        chain.append(block_hash(chain[-1] if chain else root,
                                tokens[i * block_size : (i + 1) * block_size]))
    return chain


class CachingBlockPool(BlockPool):
    """Reference-counted blocks, a hash index of full blocks, and an LRU of evictable ones.

    Every block is in exactly one state: *free* (on the free list, no hash), *held*
    (reference count > 0, with or without a hash) or *evictable* (count 0, with a hash).
    `num_free` counts free and evictable blocks: both can serve a fresh allocation.
    `residency` times each block's allocation, prefix hits (`touch`) and eviction.
    """

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self.hash_of: dict[int, BlockHash] = {}  # block -> hash (registered full blocks)
        self.block_of: dict[BlockHash, int] = {}  # hash -> block
        self.evictable: OrderedDict[int, None] = OrderedDict()  # count 0, hashed; LRU first
        self.evictions = 0
        self.residency = BlockResidency(num_blocks)

    @property
    def num_free(self) -> int:
        return super().num_free + len(self.evictable)

    @property
    def num_evictable(self) -> int:
        return len(self.evictable)

    def allocate(self) -> int:
        """A fresh block: from the free list, else the least recently used evictable one."""
        block = self._take()
        if block is None and self.evictable:
            block, _ = self.evictable.popitem(last=False)
            del self.block_of[self.hash_of.pop(block)]
            self.evictions += 1
            self.residency.evicted(block)
        elif block is None:
            raise MemoryError("block pool is empty")
        self.ref_counts[block] = 1
        self.residency.allocated(block)
        return block

    def _give(self, block: int) -> None:
        """At zero references a hashed block becomes evictable, others free."""
        if block in self.hash_of:
            self.evictable[block] = None  # most recently used at the end
        else:
            super()._give(block)

    def lookup(self, h: BlockHash) -> int | None:
        return self.block_of.get(h)

    def acquire(self, block: int) -> None:
        """Take a reference on a cached block (a prefix hit), reviving it if evictable."""
        if self.ref_counts[block] == 0:
            del self.evictable[block]
        self.ref_counts[block] += 1
        if self.ref_counts[block] == 2:
            self.shared.add(block)

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on each of a prefix hit's cached blocks (vLLM's `touch`): an
        access of each for `residency`."""
        for block in blocks:
            self.acquire(block)
        self.residency.accessed(blocks)

    def register(self, block: int, h: BlockHash) -> bool:
        """Name a held full block by its hash; False when the hash (or block) is already named
        (an identical block computed concurrently stays a private, unnamed duplicate)."""
        if h in self.block_of or block in self.hash_of:
            return False
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} is not held")
        self.hash_of[block] = h
        self.block_of[h] = block
        return True

    def is_whole(self) -> bool:
        """Nothing is held: every block is free or evictable cache."""
        return (
            not any(self.ref_counts)
            and self.num_free == self.num_blocks
        )
