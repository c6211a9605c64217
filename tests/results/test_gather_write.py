"""`write_slices` writes slices of a buffer (tokens.jsonl's lines): the file must hold
exactly the slices in order."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results import direct_file, gather_write
from kvbench.results.direct_file import DirectFile
from kvbench.results.gather_write import write_slices


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch

_slices = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=60)


def _expected(buffer: bytes, lo: np.ndarray, hi: np.ndarray) -> bytes:
    return b"".join(buffer[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True))


def _arrays(buffer: bytes, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([min(a, len(buffer)) for a, _ in pairs], dtype=np.int64)
    hi = np.array([min(a + n, len(buffer)) for a, n in pairs], dtype=np.int64)
    return lo, hi


@settings(max_examples=200, deadline=None)
@given(_slices, st.integers(1, 7), st.integers(1, 600))
def test_the_file_holds_the_slices_in_order(tmp_path_factory, monkeypatch_module, pairs,
                                            at_once, buffer_bytes):
    """Into a `DirectFile` (slices copied into its buffer, which fills and is written many
    times), and joined into any other file (a few bytes joined at a time here)."""
    buffer = bytes(range(256)) * 2
    lo, hi = _arrays(buffer, pairs)
    path = tmp_path_factory.mktemp("w") / "out"
    monkeypatch_module.setattr(gather_write, "_SLICES_AT_ONCE", at_once)
    monkeypatch_module.setattr(direct_file, "BUFFER_BYTES", buffer_bytes)
    monkeypatch_module.setattr(gather_write, "_JOIN_BYTES", buffer_bytes)
    handle = DirectFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    with handle:
        handle.write(b"head")  # held in the buffer: it goes first
        write_slices(handle, buffer, lo, hi)
        handle.write(b"tail")
    assert path.read_bytes() == b"head" + _expected(buffer, lo, hi) + b"tail"
    memory = io.BytesIO()  # any other file: joined
    write_slices(memory, buffer, lo, hi)
    assert memory.getvalue() == _expected(buffer, lo, hi)
