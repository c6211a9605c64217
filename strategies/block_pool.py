"""`BlockPool`: fixed-size KV blocks with reference counts."""

from __future__ import annotations

from collections import deque
from itertools import repeat


class BlockPool:
    """Hands out block ids `0..num_blocks-1`; a block returns to the pool when its count hits 0."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self.ref_counts = [0] * num_blocks
        self.shared: set[int] = set()  # blocks with more than one reference

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_shared(self) -> int:
        return len(self.shared)

    def allocate(self) -> int:
        if not self._free:
            raise MemoryError("block pool is empty")
        block = self._free.popleft()
        self.ref_counts[block] = 1
        return block

    def allocate_many(self, count: int) -> list[int]:
        """`count` blocks, in the order `count` calls of `allocate` would give them (a
        prompt takes dozens at once: the plain pool's are taken without a call each)."""
        if type(self).allocate is not BlockPool.allocate or count > len(self._free):
            allocate = self.allocate  # a subclass's own (a caching pool evicts in it)
            return [allocate() for _ in range(count)]
        popleft = self._free.popleft
        blocks = [popleft() for _ in range(count)]
        ref_counts = self.ref_counts
        for block in blocks:
            ref_counts[block] = 1
        return blocks

    def release_many(self, blocks: list[int]) -> None:
        """`release` of each of `blocks`, in order (a finished sequence's whole table: where
        each is held once, as plain paging's are, without a call each)."""
        ref_counts = self.ref_counts
        if (type(self).release is not BlockPool.release
                or list(map(ref_counts.__getitem__, blocks)).count(1) != len(blocks)
                or len(set(blocks)) != len(blocks)):
            for block in blocks:
                self.release(block)
            return
        list(map(ref_counts.__setitem__, blocks, repeat(0)))
        self._free.extend(blocks)

    def share(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} is not allocated")
        self.ref_counts[block] += 1
        if self.ref_counts[block] == 2:
            self.shared.add(block)

    def release(self, block: int) -> bool:
        """Drop one reference; True when the block went back to the pool."""
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} released more often than allocated")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 1:
            self.shared.discard(block)
        if self.ref_counts[block] == 0:
            self._free.append(block)
            return True
        return False

    def is_whole(self) -> bool:
        return self.num_free == self.num_blocks and not any(self.ref_counts)
