"""Property tests of the residency books against brute-force references, on random access
sequences: reuse distances (stack distances, and the hit rate an LRU cache of every size
reaches over prefix lookups) and vLLM's block lifetime, idle time and reuse gaps."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.strategies.block_residency import BlockResidency
from kvbench.strategies.reuse_distance import ReuseDistance

# A stream of operations: a lookup of a run of keys, or a use of one (a block named later).
lookups = st.lists(st.integers(0, 11), min_size=1, max_size=6)
operations = st.lists(st.one_of(st.tuples(st.just("lookup"), lookups),
                                st.tuples(st.just("use"), st.integers(0, 11))),
                      max_size=120)


def brute_distances(stream: list[int]) -> list[int]:
    """Distinct other keys since each access's previous one; -1 for a first access."""
    out = []
    for t, key in enumerate(stream):
        prev = max((p for p in range(t) if stream[p] == key), default=None)
        out.append(-1 if prev is None else len(set(stream[prev + 1:t])))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=300))
def test_access_distances_are_stack_distances(stream: list[int]) -> None:
    books = ReuseDistance()
    assert [books.access(k) for k in stream] == brute_distances(stream)


def lru_served(ops, capacity: int) -> int:
    """Blocks an LRU cache of `capacity` blocks serves to the lookups: each lookup's leading
    run of blocks it holds when they are looked up (every access makes its key the most
    recent, inserting it, and evicts the least recent past the capacity)."""
    cache: OrderedDict[int, None] = OrderedDict()
    served = 0

    def access(key: int) -> bool:
        held = key in cache
        cache[key] = None
        cache.move_to_end(key)
        while len(cache) > capacity:
            cache.popitem(last=False)
        return held

    for kind, arg in ops:
        if kind == "use":
            access(arg)
            continue
        run = True
        for key in arg:
            run = access(key) and run
            served += run
    return served


@settings(max_examples=200, deadline=None)
@given(operations)
def test_lookup_distances_give_every_lru_size_its_hits(ops) -> None:
    books = ReuseDistance()
    for kind, arg in ops:
        if kind == "use":
            books.use([arg])
        else:
            books.lookup(arg, tokens=len(arg))
    distances = list(books.distances)
    assert len(distances) == sum(len(a) for k, a in ops if k == "lookup")
    assert books.lookup_tokens == len(distances)
    for capacity in range(1, 14):
        assert sum(0 <= d < capacity for d in distances) == lru_served(ops, capacity)


def test_the_tree_grows_past_its_first_size() -> None:
    books = ReuseDistance()
    stream = [i % 700 for i in range(3000)]  # 700 keys cycled: every re-use sees 699 others
    got = [books.access(k) for k in stream]
    assert got[:700] == [-1] * 700 and set(got[700:]) == {699}


# Residency: a schedule of (block, event) with the clock moving on between events.
events = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["alloc", "hit", "evict"]),
                            st.floats(0.0, 5.0)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(events)
def test_residency_against_a_reference(schedule) -> None:
    now = [0.0]
    books = BlockResidency(4)
    books.clock = lambda: now[0]
    born: dict[int, float] = {}
    hits: dict[int, list[float]] = {}
    lifetimes, idle, gaps = [], [], []
    for block, event, dt in schedule:
        now[0] += dt
        t = now[0]
        if event == "alloc" or block not in born:  # (a block is evicted only once allocated)
            books.allocated(block)
            born[block], hits[block] = t, []
            continue
        if event == "hit":
            books.accessed([block])
            if hits[block]:
                gaps.append(t - hits[block][-1])
            hits[block].append(t)
        else:
            books.evicted(block)
            lifetimes.append(t - born[block])
            idle.append(t - (hits[block][-1] if hits[block] else born[block]))
            del born[block]
    assert list(books.lifetimes_s) == lifetimes
    assert list(books.idle_s) == idle
    assert list(books.reuse_gaps_s) == gaps


def test_rebase_keeps_ages_on_the_new_clock() -> None:
    now = [10.0]
    books = BlockResidency(2)
    books.clock = lambda: now[0]
    books.allocated(0)
    now[0] = 12.0
    books.accessed([0])
    books.evicted(0)
    assert list(books.lifetimes_s) == [2.0]
    books.allocated(1)  # at 12, lives on across the restart
    books.rebase(13.0)  # the clock restarts from 0 at 13
    assert not books.lifetimes_s
    now[0] = 1.0
    books.evicted(1)
    assert list(books.lifetimes_s) == [2.0] and list(books.idle_s) == [2.0]
