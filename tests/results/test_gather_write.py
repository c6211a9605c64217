"""`write_slices` writes slices of a buffer by writev (or joined, without a file
descriptor): the file must hold exactly the slices in order, whatever writev takes at a
time (a short write, an interrupt)."""

from __future__ import annotations

import ctypes
import errno
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results import gather_write
from kvbench.results.gather_write import write_slices

_slices = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=60)


def _expected(buffer: bytes, lo: np.ndarray, hi: np.ndarray) -> bytes:
    return b"".join(buffer[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True))


def _arrays(buffer: bytes, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([min(a, len(buffer)) for a, _ in pairs], dtype=np.int64)
    hi = np.array([min(a + n, len(buffer)) for a, n in pairs], dtype=np.int64)
    return lo, hi


@settings(max_examples=200, deadline=None)
@given(_slices, st.integers(1, 7))
def test_the_file_holds_the_slices_in_order(tmp_path_factory, pairs, iov_max):
    buffer = bytes(range(256)) * 2
    lo, hi = _arrays(buffer, pairs)
    path = tmp_path_factory.mktemp("w") / "out"
    saved = gather_write._IOV_MAX
    gather_write._IOV_MAX = iov_max  # batches of a few slices
    try:
        with path.open("wb") as handle:
            handle.write(b"head")  # held by the file object: it goes first
            write_slices(handle, buffer, lo, hi)
            handle.write(b"tail")
    finally:
        gather_write._IOV_MAX = saved
    assert path.read_bytes() == b"head" + _expected(buffer, lo, hi) + b"tail"
    memory = io.BytesIO()  # no file descriptor: joined
    write_slices(memory, buffer, lo, hi)
    assert memory.getvalue() == _expected(buffer, lo, hi)


def test_short_writes_and_interrupts_are_finished(tmp_path, monkeypatch):
    """A writev that takes a few bytes at a time, or is interrupted, still writes it all."""
    real = gather_write._writev()
    if real is None:
        pytest.skip("no writev here")
    calls = []

    def stingy(fd, address, count):
        calls.append(count)
        if len(calls) % 3 == 1:  # an interrupt
            ctypes.set_errno(errno.EINTR)
            return -1
        iov = np.frombuffer(ctypes.string_at(address, 16), dtype=np.uint64)
        one = np.array([iov[0], min(int(iov[1]), 3)], dtype=np.uint64)  # 3 bytes at most
        return real(fd, one.ctypes.data, 1)

    monkeypatch.setattr(gather_write, "_writev", lambda: stingy)
    buffer = bytes(range(256))
    lo = np.array([5, 50, 0, 200, 10], dtype=np.int64)
    hi = np.array([40, 51, 0, 256, 90], dtype=np.int64)
    path = tmp_path / "out"
    with path.open("wb") as handle:
        write_slices(handle, buffer, lo, hi)
    assert path.read_bytes() == _expected(buffer, lo, hi)
    assert len(calls) >= 2


def test_an_error_is_raised(tmp_path, monkeypatch):
    def full(fd, address, count):
        ctypes.set_errno(errno.ENOSPC)
        return -1

    monkeypatch.setattr(gather_write, "_writev", lambda: full)
    with (tmp_path / "out").open("wb") as handle, pytest.raises(OSError, match="space"):
        write_slices(handle, b"abc", np.array([0]), np.array([2]))
