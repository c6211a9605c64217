"""`DirectFile` writes results past the page cache where it can: whatever the system allows
(`O_DIRECT`, or not; a write refused or cut short), the file must hold exactly what was
written, in order."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def small_buffer():
    """A buffer of 4 KiB, the smallest `O_DIRECT` takes: writes a few KiB fill it often."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_file, "BUFFER_BYTES", 4096)
        yield


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=5000), max_size=12))
def test_the_file_holds_what_was_written(tmp_path_factory, small_buffer, pieces):
    path = tmp_path_factory.mktemp("d") / "out"
    with _open(path) as handle:
        for piece in pieces:
            assert handle.write(piece) == len(piece)
    assert path.read_bytes() == b"".join(pieces)


def test_big_writes_go_past_the_page_cache_here(tmp_path):
    """On this Linux filesystem the flag is taken, and 20 MB come back whole (several full
    buffers, then the tail without the flag)."""
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this system")
    data = os.urandom(20 << 20) + b"tail"
    path = tmp_path / "out"
    with _open(path) as handle:
        handle.write(data[:1000])
        handle.write(data[1000:])
        direct = handle.direct
    assert path.read_bytes() == data
    if not direct:
        pytest.skip("this filesystem refuses O_DIRECT: written the usual way")


@settings(max_examples=40, deadline=None)
@given(_pieces, st.integers(1, 2))
def test_a_refused_or_short_direct_write_goes_on_without_the_flag(
        tmp_path_factory, small_buffer, pieces, refuse_after):
    """A filesystem that takes the flag but refuses its writes (EINVAL), or a write cut
    short: the rest is written the usual way, and nothing is lost or written twice."""
    path = tmp_path_factory.mktemp("d") / "out"
    real_write = os.write
    calls = []
    refused = []

    def flaky(fd, data):
        calls.append(len(data))
        if len(calls) == refuse_after and handle.direct:
            refused.append(True)
            raise OSError(errno.EINVAL, "Invalid argument")
        if len(calls) == refuse_after + 1 and len(data) > 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # short
        return real_write(fd, data)

    handle = _open(path)
    handle.direct = True  # (as where the flag is taken)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_file.os, "write", flaky)
        with handle:
            for piece in pieces:
                handle.write(piece)
                handle.write(bytes(range(256)) * 20)  # three buffers or more in all
    assert path.read_bytes() == b"".join(p + bytes(range(256)) * 20 for p in pieces)
    assert refused and len(calls) > refuse_after + 1


def test_errors_other_than_a_refused_flag_are_raised(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    handle = _open(tmp_path / "out")
    monkeypatch.setattr(direct_file.os, "write", full)
    with pytest.raises(OSError, match="space"):
        handle.write(b"x" * (direct_file.BUFFER_BYTES + 1))
    monkeypatch.undo()
    handle.close()


def test_an_atomic_direct_file_appears_whole_or_not_at_all(tmp_path):
    with atomic_direct_file(tmp_path / "tokens.jsonl") as handle:
        handle.write(b"line\n" * 1000)
    assert (tmp_path / "tokens.jsonl").read_bytes() == b"line\n" * 1000
    assert oct((tmp_path / "tokens.jsonl").stat().st_mode & 0o777) == "0o644"
    with pytest.raises(RuntimeError), atomic_direct_file(tmp_path / "other.jsonl") as handle:
        handle.write(b"half")
        raise RuntimeError("stopped")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.jsonl"]
