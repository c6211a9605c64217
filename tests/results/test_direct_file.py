"""`DirectFile` writes results past the page cache where it can: whatever the system allows
(`O_DIRECT`, or not; a write refused, cut short or failed), the file must hold exactly what
was written, in order, and nothing twice."""

from __future__ import annotations

import contextlib
import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results import direct_file
from kvbench.results.direct_file import DirectFile
from kvbench.results.files import atomic_direct_file

_pieces = st.lists(st.binary(max_size=300), min_size=3, max_size=30)


def _open(path) -> DirectFile:
    return DirectFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


@contextlib.contextmanager
def _small_buffer(size: int = 4096):
    """A buffer of 4 KiB, the smallest `O_DIRECT` takes: writes of a few KiB fill it often."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_file, "BUFFER_BYTES", size)
        yield


@contextlib.contextmanager
def _writes(replacement):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_file.os, "write", replacement)
        yield


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=5000), max_size=12))
def test_the_file_holds_what_was_written(tmp_path_factory, pieces):
    path = tmp_path_factory.mktemp("d") / "out"
    with _small_buffer(), _open(path) as handle:
        for piece in pieces:
            assert handle.write(piece) == len(piece)
    assert path.read_bytes() == b"".join(pieces)


def test_big_writes_go_past_the_page_cache_where_the_filesystem_takes_the_flag(tmp_path):
    """20 MB (two full 8 MB buffers, then the tail without the flag) come back whole; on a
    Linux filesystem that takes `O_DIRECT` (this one's, where the test runs) the full buffers
    went with it."""
    data = os.urandom(20 << 20) + b"tail"
    path = tmp_path / "out"
    modes = []
    real_write = os.write

    def noting(fd, view):
        modes.append(bool(direct_file.fcntl.fcntl(fd, direct_file.fcntl.F_GETFL)
                          & getattr(os, "O_DIRECT", 0)) if direct_file.fcntl else False)
        return real_write(fd, view)

    with _writes(noting), _open(path) as handle:
        handle.write(data[:1000])
        handle.write(data[1000:])
        flag_taken = handle.direct
    assert path.read_bytes() == data
    if not flag_taken:
        pytest.skip("this system or filesystem refuses O_DIRECT: written the usual way")
    assert modes == [True, True, False]  # two full buffers direct, the tail not


@settings(max_examples=40, deadline=None)
@given(_pieces, st.integers(1, 2), st.sampled_from(["refused", "short"]))
def test_a_refused_or_short_direct_write_goes_on_without_the_flag(
        tmp_path_factory, pieces, at_call, how):
    """A filesystem that takes the flag but refuses a write (EINVAL), or a direct write cut
    short: the rest is written the usual way, and nothing is lost or written twice."""
    path = tmp_path_factory.mktemp("d") / "out"
    real_write = os.write
    calls: list[bool] = []  # whether each write went while the flag was on

    def flaky(fd, data):
        calls.append(handle.direct)
        if len(calls) == at_call and handle.direct:
            if how == "refused":
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_write(fd, bytes(data)[:512])  # short, still aligned
        return real_write(fd, data)

    block = bytes(range(256)) * 20  # three buffers or more in all
    with _small_buffer():
        handle = _open(path)
        handle.direct = True  # (as where the flag is taken)
        with _writes(flaky), handle:
            for piece in pieces:
                handle.write(piece)
                handle.write(block)
    assert path.read_bytes() == b"".join(p + block for p in pieces)
    assert calls[at_call - 1] and not calls[at_call]  # the flag went with that write


def test_after_a_failed_write_nothing_more_is_written(tmp_path):
    """A full disk: the write raises, later writes are refused, and `close` does not write
    the buffer's bytes again (they would follow what the disk took)."""
    path = tmp_path / "out"
    real_write = os.write
    taken = []

    def full_after_one(fd, data):
        if taken:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken.append(len(data))
        return real_write(fd, data)

    with _small_buffer():
        handle = _open(path)
        with _writes(full_after_one):
            handle.write(b"a" * 4096)  # the first buffer: written
            with pytest.raises(OSError, match="space"):
                handle.write(b"b" * 4096)
            with pytest.raises(OSError, match="earlier write"):
                handle.write(b"c")
            handle.close()
    assert path.read_bytes() == b"a" * 4096


def test_an_atomic_direct_file_appears_whole_or_not_at_all(tmp_path):
    with atomic_direct_file(tmp_path / "tokens.jsonl") as handle:
        handle.write(b"line\n" * 1000)
    assert (tmp_path / "tokens.jsonl").read_bytes() == b"line\n" * 1000
    assert oct((tmp_path / "tokens.jsonl").stat().st_mode & 0o777) == "0o644"
    with pytest.raises(KeyboardInterrupt), atomic_direct_file(tmp_path / "other") as handle:
        handle.write(b"half")
        raise KeyboardInterrupt  # (the error stays the block's: the tail is not written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.jsonl"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=9000), min_size=1, max_size=8))
def test_a_flush_leaves_at_most_a_part_block_unwritten(tmp_path_factory, pieces):
    """What a killed run's partial file holds: after each `flush`, everything written but
    less than a block (with the flag) or nothing (without); then the whole, at close."""
    path = tmp_path_factory.mktemp("d") / "out"
    written = b""
    with _small_buffer(3 * 4096), _open(path) as handle:
        for piece in pieces:
            handle.write(piece)
            handle.flush()
            written += piece
            on_disk = path.read_bytes()
            assert written.startswith(on_disk)
            assert len(written) - len(on_disk) < (4096 if handle.direct else 1)
    assert path.read_bytes() == written
