"""`FreeRanges`: the holes of a contiguous arena, carved first-fit and merged on release."""

from __future__ import annotations

import bisect


class FreeRanges:
    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._starts: list[int] = [0] if num_slots else []
        self._lengths: list[int] = [num_slots] if num_slots else []

    @property
    def holes(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._lengths, strict=True))

    @property
    def num_free(self) -> int:
        return sum(self._lengths)

    def largest_hole(self) -> int:
        return max(self._lengths, default=0)

    def allocate(self, length: int) -> int | None:
        """First-fit: the lowest-addressed hole that fits; None when none does."""
        for i, hole in enumerate(self._lengths):
            if hole >= length:
                start = self._starts[i]
                if hole == length:
                    del self._starts[i], self._lengths[i]
                else:
                    self._starts[i] += length
                    self._lengths[i] -= length
                return start
        return None

    def release(self, start: int, length: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        prev_end = self._starts[i - 1] + self._lengths[i - 1] if i > 0 else -1
        if prev_end > start or (i < len(self._starts) and start + length > self._starts[i]):
            raise ValueError(f"range [{start}, {start + length}) overlaps a free hole")
        if i > 0 and prev_end == start:
            self._lengths[i - 1] += length
            if i < len(self._starts) and start + length == self._starts[i]:
                self._lengths[i - 1] += self._lengths[i]
                del self._starts[i], self._lengths[i]
        elif i < len(self._starts) and start + length == self._starts[i]:
            self._starts[i] = start
            self._lengths[i] += length
        else:
            self._starts.insert(i, start)
            self._lengths.insert(i, length)

    def is_whole(self) -> bool:
        return self._starts == ([0] if self.num_slots else []) and self.num_free == self.num_slots
