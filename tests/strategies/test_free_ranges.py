"""The contiguous arena's hole list against a slot-by-slot model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.strategies.free_ranges import FreeRanges


def test_first_fit_takes_lowest_hole_that_fits():
    ranges = FreeRanges(100)
    a = ranges.allocate(10)
    b = ranges.allocate(20)
    c = ranges.allocate(10)
    assert (a, b, c) == (0, 10, 30)
    ranges.release(b, 20)  # hole [10, 30)
    assert ranges.allocate(25) == 40  # does not fit the 20-slot hole
    assert ranges.allocate(15) == 10  # first fit: the lower hole
    assert ranges.largest_hole() == 35


def test_release_merges_neighbours_and_rejects_double_free():
    ranges = FreeRanges(30)
    starts = [ranges.allocate(10) for _ in range(3)]
    ranges.release(starts[0], 10)
    ranges.release(starts[2], 10)
    ranges.release(starts[1], 10)
    assert ranges.holes == [(0, 30)] and ranges.is_whole()
    with pytest.raises(ValueError):
        ranges.release(0, 5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=60))
def test_matches_slot_model(ops):
    size = 128
    ranges = FreeRanges(size)
    owner = [None] * size
    live: list[tuple[int, int]] = []
    for do_alloc, length in ops:
        if do_alloc or not live:
            start = ranges.allocate(length)
            # first fit on the slot model
            expected = next(
                (s for s in range(size - length + 1)
                 if all(o is None for o in owner[s : s + length])),
                None,
            )
            assert start == expected
            if start is not None:
                for i in range(start, start + length):
                    owner[i] = start
                live.append((start, length))
        else:
            start, n = live.pop(length % len(live))
            ranges.release(start, n)
            for i in range(start, start + n):
                owner[i] = None
        assert ranges.num_free == owner.count(None)
        holes = ranges.holes
        assert all(a + n < b for (a, n), (b, _) in zip(holes, holes[1:], strict=False))
    for start, n in live:
        ranges.release(start, n)
    assert ranges.is_whole()
