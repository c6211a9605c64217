"""`DirectFile`: a results file written in large parts, on a descriptor it takes over."""

from __future__ import annotations

import io


class DirectFile(io.FileIO):
    """A binary file opened for writing on `fd` (closed with it). Its writers write whole
    batches of rows at a time, so it adds no buffer of its own."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd, "wb", closefd=True)

    def write(self, data) -> int:
        """Write all of `data` (a raw file may take part of it)."""
        view = memoryview(data).cast("B")
        while view:
            view = view[super().write(view) :]
        return len(data)

    def discard(self) -> None:
        """Close the file that is to be deleted."""
        self.close()


__all__ = ["DirectFile"]
