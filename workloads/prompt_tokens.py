"""`PromptTokens`: a prompt of random token ids drawn only when something reads them.

A strategy that reads no ids (paged, contiguous, fp8) needs only a prompt's length; holding
the ids of a million-request trace would cost gigabytes. The first read of any id draws all of
the workload's prompts at once (`LazyRows`), as an eager draw would, so the ids are the same
whether or not, and whenever, they are read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Sequence as SequenceABC
from functools import total_ordering
from typing import overload


class LazyRows:
    """Rows of token ids that `draw()` gives, drawn on the first `row` call."""

    __slots__ = ("_draw", "_rows")

    def __init__(self, draw: Callable[[], list[tuple[int, ...]]]) -> None:
        self._draw: Callable[[], list[tuple[int, ...]]] | None = draw
        self._rows: list[tuple[int, ...]] | None = None

    @property
    def is_drawn(self) -> bool:
        return self._rows is not None

    def row(self, index: int) -> tuple[int, ...]:
        rows = self._rows
        if rows is None:
            assert self._draw is not None
            rows = self._rows = self._draw()
            self._draw = None  # its generator and lengths are not needed again
        return rows[index]

    def prompts(self, lengths: list[int]) -> list[PromptTokens]:
        """One `PromptTokens` per row (`lengths`: the rows' lengths, as plain ints)."""
        return [PromptTokens(self, i, n) for i, n in enumerate(lengths)]


@total_ordering
class PromptTokens(SequenceABC[int]):
    """The first `length` token ids of row `index` of `rows`, a tuple-like read-only
    sequence (equal to, and hashing as, the tuple of its ids)."""

    __slots__ = ("_index", "_len", "_rows")

    def __init__(self, rows: LazyRows, index: int, length: int) -> None:
        self._rows = rows
        self._index = index
        self._len = length

    @property
    def is_drawn(self) -> bool:
        """Whether the ids were drawn (something read them, or a prompt of the same
        workload)."""
        return self._rows.is_drawn

    def ids(self) -> tuple[int, ...]:
        """The token ids, drawn now if nothing read them before."""
        row = self._rows.row(self._index)
        return row if len(row) == self._len else row[: self._len]

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> SequenceABC[int]: ...

    def __getitem__(self, key: int | slice) -> int | SequenceABC[int]:
        if isinstance(key, slice) and key.start in (None, 0) and key.step in (None, 1):
            # a head (clipping keeps a prompt's first tokens): still undrawn
            stop = self._len if key.stop is None else key.stop
            length = max(0, min(self._len, stop if stop >= 0 else self._len + stop))
            return PromptTokens(self._rows, self._index, length)
        return self.ids()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptTokens):
            if other._rows is self._rows and other._index == self._index:
                return other._len == self._len
            return self.ids() == other.ids()
        if isinstance(other, tuple):
            return len(other) == self._len and self.ids() == other
        return NotImplemented

    def __lt__(self, other: object) -> bool:  # ordered as the tuple of its ids
        if isinstance(other, PromptTokens):
            return self.ids() < other.ids()
        if isinstance(other, tuple):
            return self.ids() < other
        raise TypeError(f"a prompt compares with a prompt or a tuple, not {type(other).__name__}")

    def __hash__(self) -> int:
        return hash(self.ids())

    def __add__(self, other: tuple[int, ...]) -> tuple[int, ...]:
        return self.ids() + tuple(other)

    def __repr__(self) -> str:
        return f"PromptTokens(len={self._len}, drawn={self.is_drawn})"
