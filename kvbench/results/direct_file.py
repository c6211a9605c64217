"""`DirectFile`: a results file written past the page cache (`O_DIRECT`), where the system
allows it.

A million-request simulation writes GBs of results (tokens.jsonl alone is ~4 GB). Written
the usual way, every page goes through the kernel's page cache first, and on the development
VM that costs 2-3 s of system CPU per GB: more than a tenth of the whole command, and GBs
of cache the user's other work loses. With `O_DIRECT` the kernel sends the pages from
our buffer to the disk: measured on the same VM, 4.3 GB took 0.2-0.3 s of CPU (and 2-2.6 s
of wall time) against 7-13 s of system CPU buffered (docs/simulator.md, Speed and output
files, has the whole command's figures). The price is a copy into an aligned buffer here, and writes that wait for the disk.

`O_DIRECT` wants the buffer, the file offset and the length aligned to the device's block:
the writes are whole buffers of `BUFFER_BYTES` (a multiple of any block size) from a
page-aligned `mmap`, or what `flush` writes (whole 4 KiB blocks), and the tail, shorter, is
written after the flag is cleared. Where the
flag is unknown (not Linux) or refused (a filesystem without it: EINVAL), the file is
written the usual way; the bytes are the same either way.
"""

from __future__ import annotations

import errno
import io
import mmap
import os

BUFFER_BYTES = 8 << 20  # a whole number of 4 KiB blocks
_BLOCK_BYTES = 4096  # what `O_DIRECT` takes at most, as alignment, on Linux filesystems

try:
    import fcntl
except ImportError:  # (Windows)
    fcntl = None  # type: ignore[assignment]


class DirectFile(io.RawIOBase):
    """A binary file opened for writing on `fd` (taken over: `close` closes it, and so does
    a constructor that fails), written
    with `O_DIRECT` a buffer at a time where it can be. `fileno` is refused, so that no
    caller writes around the buffer. After a write fails (a full disk), the file takes no
    more and `close` writes nothing more: what the buffer held is not written twice."""

    _buffer: mmap.mmap | None = None  # (None: not set up, or closed)

    def __init__(self, fd: int) -> None:
        super().__init__()
        try:
            buffer = mmap.mmap(-1, BUFFER_BYTES)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._buffer, self._view = buffer, memoryview(buffer)
        self._used = 0
        self._failed = False
        self.direct = _set_direct(fd, True)

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Copy `data` into the buffer, writing it out each time it fills."""
        self._check_open()
        source = memoryview(data).cast("B")
        done = 0
        while done < len(source):
            take = min(BUFFER_BYTES - self._used, len(source) - done)
            self._view[self._used : self._used + take] = source[done : done + take]
            self._used += take
            done += take
            if self._used == BUFFER_BYTES:
                self._write_out(self._view)
        return done

    def write_slices(self, source: bytes, starts: list[int], stops: list[int]) -> None:
        """`write` of `source[starts[i]:stops[i]]` for every i, in order, each copied
        straight into the buffer (no joined copy: tokens.jsonl is millions of slices)."""
        self._check_open()
        from_view, view = memoryview(source), self._view
        used = self._used
        for start, stop in zip(starts, stops, strict=True):
            end = used + stop - start
            if end < BUFFER_BYTES:
                view[used:end] = from_view[start:stop]
                used = end
                continue
            self._used = used  # the slice fills the buffer: `write` splits it
            self.write(from_view[start:stop])
            used = self._used
        self._used = used

    def flush(self) -> None:
        """Write what the buffer holds but, with `O_DIRECT`, its last part-block (kept at
        the buffer's start): a reader of the file, or of a killed run's, sees all but a few
        KB of what was written (a streamed file's rows so far)."""
        if self.closed or self._buffer is None or self._failed or not self._used:
            return
        keep = self._used % _BLOCK_BYTES if self.direct else 0
        out = self._used - keep
        if out:
            self._write_out(self._view[:out])
            self._view[:keep] = self._view[out : out + keep]  # (apart: out >= a block > keep)
            self._used = keep

    def close(self) -> None:
        """Write what the buffer holds (the tail, without `O_DIRECT`) and close the file."""
        self._close(write_tail=True)

    def discard(self) -> None:
        """Close the file without writing what the buffer holds (it is to be deleted)."""
        self._close(write_tail=False)

    def _close(self, write_tail: bool) -> None:
        if self.closed or self._buffer is None:
            super().close()
            return
        try:
            if write_tail and self._used and not self._failed:
                if self.direct:
                    self.direct = _set_direct(self._fd, False)
                self._write_out(self._view[: self._used])
        finally:
            self._view.release()
            try:
                self._buffer.close()
            except BufferError:  # a slice of it held by an error's traceback: freed with it
                pass
            self._buffer = None
            os.close(self._fd)
            super().close()

    def _check_open(self) -> None:
        if self.closed or self._buffer is None:
            raise ValueError("write to a closed file")
        if self._failed:
            raise OSError("an earlier write to this file failed")

    def _write_out(self, view: memoryview) -> None:
        """Write all of `view` at the file's position and empty the buffer (a short direct
        write, or one refused, goes on without the flag: the offset may no longer be
        aligned). Any other error leaves the file failed."""
        try:
            while len(view):
                try:
                    written = os.write(self._fd, view)
                except OSError as err:
                    if err.errno == errno.EINTR:
                        continue
                    if not (self.direct and err.errno == errno.EINVAL):
                        raise
                    self.direct = _set_direct(self._fd, False)
                    if self.direct:  # (the flag could not be cleared)
                        raise
                    continue
                if not written:
                    raise OSError(errno.EIO, "the file took no bytes")
                view = view[written:]
                if len(view) and self.direct:
                    self.direct = _set_direct(self._fd, False)
        except BaseException:
            self._failed = True
            raise
        self._used = 0


def _set_direct(fd: int, on: bool) -> bool:
    """Turn `O_DIRECT` on or off for `fd`; whether it is on after (off where it is not
    known; as it was where the filesystem refuses the change)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or fcntl is None:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | flag) if on else (flags & ~flag))
    except OSError:
        pass
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & flag)


__all__ = ["BUFFER_BYTES", "DirectFile"]
