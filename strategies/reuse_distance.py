"""`ReuseDistance`: the stack distance of every prefix lookup's blocks, to size a cache tier.

The access stream is the prefix cache's blocks in the order requests use them: at a
sequence's admission its lookup (the hashes of its prompt's full blocks up to the block
holding its last token, as `prefix` looks them up), then each block it computes past those
when it is named. A block's **reuse distance** at a lookup is the number of distinct other
blocks used since its previous use (its LRU stack distance): an LRU cache of N blocks still
holds it exactly when that number is below N. A prefix hit is a leading run (a block is
served only with its parents), so a lookup records for each block the largest distance of
its chain so far: an LRU cache of N blocks serves it exactly when that is below N. A block
never used before has no distance (a cold miss, recorded as -1): no cache size serves it.

So `hits_below(N)` is what an LRU cache of N blocks over this stream would serve, for every
N at once (Mattson's stack algorithm). It is a model of the GPU cache, not the GPU cache:
vLLM's cache holds running requests' blocks out of its eviction order.

The distance of an access at time t to a block last used at time p is
`t - p - 1 - #{earlier re-accesses j: prev(j) > p}` (the uses in between, less those that
were not a block's first use in between). The count is a Fenwick tree over times, marked
at `prev(j)` for each re-access j: a first use costs one dict store, a re-use two walks of
log(accesses) steps. Memory: one dict entry per distinct block ever used, one tree slot per
access.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable


class ReuseDistance:
    """Reuse distances of a block access stream (see the module docstring)."""

    def __init__(self) -> None:
        self._last: dict[Hashable, int] = {}  # block key -> time of its last use
        self._time = 0  # accesses so far
        self._tree = [0] * 1025  # Fenwick tree over times (1-based), marked at prev(j)
        self._marked = bytearray(1024)  # the marks themselves, to rebuild a larger tree
        self._reuses = 0  # re-accesses so far (marks in the tree)
        self.distances = array("q")  # per looked-up block: its lookup's distance, -1: cold
        self.lookup_tokens = 0  # tokens the lookups were made for (the hit rate's base)

    def _grow(self, past: int) -> None:
        """A tree over times up to `past` at least (doubling), rebuilt from the marks."""
        size = len(self._marked)
        while size <= past:
            size *= 2
        self._marked.extend(bytes(size - len(self._marked)))
        tree = [0] * (size + 1)
        for i, m in enumerate(self._marked, start=1):
            if m:
                tree[i] += 1
        for i in range(1, size + 1):  # linear-time build: push each node to its parent
            parent = i + (i & -i)
            if parent <= size:
                tree[parent] += tree[i]
        self._tree = tree

    def access(self, key: Hashable) -> int:
        """Use `key` now; its distance, -1 for a first use."""
        t = self._time
        self._time = t + 1
        last = self._last
        p = last.get(key)
        last[key] = t
        if p is None:
            return -1
        return self._reused(p, t)

    def _reused(self, p: int, t: int) -> int:
        """The distance of a use at `t` of a block last used at `p`; marks `p`."""
        if p >= len(self._marked):  # (only re-uses read or mark the tree)
            self._grow(p)
        tree = self._tree
        i, below = p + 1, 0  # re-accesses j with prev(j) <= p
        while i:
            below += tree[i]
            i &= i - 1
        distance = t - p - 1 - (self._reuses - below)
        self._reuses += 1
        self._marked[p] = 1
        i, n = p + 1, len(tree) - 1
        while i <= n:
            tree[i] += 1
            i += i & -i
        return distance

    def use(self, keys: Iterable[Hashable]) -> None:
        """Blocks used outside a lookup (computed and named: mostly first uses); `access` of
        each, inline (it runs for every block a prefix-cached sequence names)."""
        last = self._last
        t = self._time
        for key in keys:
            p = last.get(key)
            last[key] = t
            if p is not None:
                self._reused(p, t)
            t += 1
        self._time = t

    def lookup(self, keys: Iterable[Hashable], tokens: int) -> None:
        """A lookup of `keys` (a chain, in order) for `tokens` prompt tokens: each block's
        distance is the largest of its chain so far (-1 from the first cold block on)."""
        worst = 0
        out = self.distances
        last = self._last
        t = self._time
        for key in keys:
            p = last.get(key)
            last[key] = t
            if p is None:
                worst = -1
            elif worst >= 0:
                d = self._reused(p, t)
                if d > worst:
                    worst = d
            else:
                self._reused(p, t)
            out.append(worst)
            t += 1
        self._time = t
        self.lookup_tokens += tokens

    def reset(self) -> None:
        """Forget the lookups so far (after a warm-up); what was used stays in the stack."""
        self.distances = array("q")
        self.lookup_tokens = 0
