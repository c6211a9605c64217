"""`BlockPool`: fixed-size KV blocks with reference counts."""

from __future__ import annotations

# Taken blocks are cut from the front of the free list once this many have piled up there.
_COMPACT_AT = 4096


class BlockPool:
    """Hands out block ids `0..num_blocks-1`; a block returns to the pool when its count hits 0.

    Free blocks are handed out first in, first out (as vLLM's free queue). The free list is
    a list read from `_head` on, so that a prompt's dozens of blocks, or the few of a decode
    run's step, are one slice and a finished sequence's table one `extend`, not a call each.

    `counts_references`: keep each block's reference count. A pool whose blocks are only
    ever held once (plain paging's: it shares none) may go without, as a long simulation
    takes and frees hundreds of millions of blocks; `release_many` then trusts that what it
    gets back was held, and `KVBENCH_CHECK_ACCOUNTING` turns the counts back on.
    """

    def __init__(self, num_blocks: int, counts_references: bool = True) -> None:
        self.num_blocks = num_blocks
        self._free: list[int] = list(range(num_blocks))
        self._head = 0
        self.ref_counts = [0] * num_blocks
        self.shared: set[int] = set()  # blocks with more than one reference
        self.counts_references = counts_references

    @property
    def num_free(self) -> int:
        return len(self._free) - self._head

    @property
    def num_shared(self) -> int:
        return len(self.shared)

    def free_blocks(self) -> list[int]:
        """The free list, in the order its blocks will be handed out."""
        return self._free[self._head :]

    def _take(self) -> int | None:
        """The next free block off the free list (None: it is empty)."""
        head = self._head
        free = self._free
        if head >= len(free):
            return None
        block = free[head]
        self._head = head + 1
        if head >= _COMPACT_AT and 2 * head >= len(free):
            self._compact()
        return block

    def _compact(self) -> None:
        del self._free[: self._head]
        self._head = 0

    def _give(self, block: int) -> None:
        """Put a block back at the end of the free list."""
        self._free.append(block)

    def allocate(self) -> int:
        block = self._take()
        if block is None:
            raise MemoryError("block pool is empty")
        if self.counts_references:
            self.ref_counts[block] = 1
        return block

    def allocate_many(self, count: int) -> list[int]:
        """`count` blocks, in the order `count` calls of `allocate` would give them (a
        prompt takes dozens at once: the plain pool's are taken without a call each)."""
        head = self._head
        free = self._free
        if type(self).allocate is not BlockPool.allocate or head + count > len(free):
            allocate = self.allocate  # a subclass's own (a caching pool evicts in it)
            return [allocate() for _ in range(count)]
        blocks = free[head : head + count]
        self._head = head = head + count
        if head >= _COMPACT_AT and 2 * head >= len(free):
            self._compact()
        if self.counts_references:
            ref_counts = self.ref_counts
            for block in blocks:
                ref_counts[block] = 1
        return blocks

    def release_many(self, blocks: list[int]) -> None:
        """`release` of each of `blocks`, in order (a finished sequence's whole table: where
        each is held once, as plain paging's are, without a call each)."""
        if type(self)._give is not BlockPool._give:  # (a caching pool keeps hashed ones)
            for block in blocks:
                self.release(block)
            return
        if self.counts_references:
            ref_counts = self.ref_counts
            if ([ref_counts[block] for block in blocks].count(1) != len(blocks)
                    or len(set(blocks)) != len(blocks)):
                for block in blocks:  # shared, or released twice: `release` says which
                    self.release(block)
                return
            for block in blocks:
                ref_counts[block] = 0
        self._free.extend(blocks)

    def share(self, block: int) -> None:
        if not self.counts_references:
            raise ValueError("a pool without reference counts shares no block")
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} is not allocated")
        self.ref_counts[block] += 1
        if self.ref_counts[block] == 2:
            self.shared.add(block)

    def release(self, block: int) -> bool:
        """Drop one reference; True when the block went back to the pool."""
        if not self.counts_references:
            self._give(block)
            return True
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} released more often than allocated")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 1:
            self.shared.discard(block)
        if self.ref_counts[block] == 0:
            self._give(block)
            return True
        return False

    def is_whole(self) -> bool:
        return self.num_free == self.num_blocks and not any(self.ref_counts)
