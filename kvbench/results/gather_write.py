"""`write_slices`: write many slices of one buffer to a file, in order.

tokens.jsonl is cut from one text: a line's head, then a slice per range of the steps its
sample decoded in (`kvbench.results.token_file`), about 180,000 slices at 10,000 ShareGPT
requests and millions at a million. A `DirectFile` (what the runner writes results to) copies
each slice straight into its buffer; any other file gets them joined a few MB at a time. The
bytes written are the same.
"""

from __future__ import annotations

from typing import IO

import numpy as np

from kvbench.results.direct_file import DirectFile

# Slices joined into one write for a file that is not a `DirectFile`: a buffer this small
# is reused by the allocator, where one of tens of MB is fresh memory each time.
_JOIN_BYTES = 1 << 22
_SLICES_AT_ONCE = 1 << 16


def write_slices(handle: IO[bytes], buffer: bytes, lo: np.ndarray, hi: np.ndarray) -> None:
    """Write `buffer[lo[i]:hi[i]]` for every i, in order, to the binary file `handle`."""
    lengths = hi - lo
    keep = lengths > 0
    lo, lengths = lo[keep].astype(np.int64), lengths[keep].astype(np.int64)
    if not lo.size:
        return
    if isinstance(handle, DirectFile):
        for first in range(0, lo.size, _SLICES_AT_ONCE):  # (lists of a bounded size)
            part = lo[first : first + _SLICES_AT_ONCE]
            handle.write_slices(buffer, part.tolist(),
                                (part + lengths[first : first + _SLICES_AT_ONCE]).tolist())
        return
    _write_joined(handle, buffer, lo, lengths)


def _write_joined(handle: IO[bytes], buffer: bytes, lo: np.ndarray,
                  lengths: np.ndarray) -> None:
    """`write_slices` by joining the slices, about `_JOIN_BYTES` at a time."""
    view = memoryview(buffer)
    stops = lo + lengths
    for first, stop in chunk_bounds(lengths, _JOIN_BYTES):
        handle.write(b"".join(map(view.__getitem__, map(
            slice, lo[first:stop].tolist(), stops[first:stop].tolist()))))


def chunk_bounds(lengths: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive (first, stop) index ranges of `lengths` (non-negative ints) holding about
    `size` in all each: a range ends with the element whose running total reaches the next
    multiple of `size`. Empty ranges are left out."""
    done = np.cumsum(lengths)
    total = int(done[-1]) if done.size else 0
    cuts = np.searchsorted(done, np.arange(size, total, size), side="right").tolist()
    return [(first, stop) for first, stop in zip([0, *cuts], [*cuts, len(lengths)],
                                                 strict=True) if stop > first]


__all__ = ["chunk_bounds", "write_slices"]
