"""Atomic writes of a results folder's files, and the checks of where they go."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.results.metrics import nan_to_none

if TYPE_CHECKING:
    import pandas as pd


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """A binary file to write in parts that appears at `path` whole, when the block ends
    without an error, or not at all: a temporary file, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # a full disk's write names no file: the one meant
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`path` holds `data` whole or is as it was: a temporary file, then a rename."""
    with atomic_file(path) as handle:
        handle.write(data)


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(nan_to_none(data), indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


def check_output_folder(out: Path | str, flag: str = "--out") -> None:
    """Refuse an output folder that cannot be written (empty, a file, /proc, read-only, full),
    by trying: create the folder, write and delete a probe file, then remove again any folder
    the probe created, so a run refused later for another reason leaves nothing behind.

    `out` as the user typed it: `Path("")` is the current folder, so an empty `--out ''` (an
    unset shell variable) is seen only as a string."""
    if isinstance(out, str) and not out.strip():
        raise KvbenchInputError(f"{flag} is empty: name the folder to write into")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise KvbenchInputError(f"{flag} {out} is a file, not a folder")
    created: list[Path] = []
    try:
        missing = [p for p in (out, *out.parents) if not p.exists()]
        for path in reversed(missing):
            path.mkdir()
            created.append(path)
        fd, probe = tempfile.mkstemp(prefix=".kvbench-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise KvbenchInputError(f"{flag} {out} cannot be written: {reason}") from None
    finally:
        for path in reversed(created):
            try:
                path.rmdir()
            except OSError:
                pass


def claim_folder(root: Path, name: str, suffix: str = "") -> Path:
    """Create `root/<name><suffix>` (or of `<name>-2`, `-3`, ... when either that or
    `root/<name>` is taken) and return it. `mkdir` without exist_ok is the lock: two started
    in the same second into one folder never share one."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    k = 0
    while True:
        k += 1
        final = root / (name if k == 1 else f"{name}-{k}")
        claimed = final.with_name(final.name + suffix)
        try:
            claimed.mkdir()
        except FileExistsError:
            continue
        if not suffix or not final.exists():
            return claimed
        claimed.rmdir()  # finished and renamed by another session already


def out_of_space(err: OSError) -> bool:
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(folder: Path, err: OSError) -> KvbenchRunError:
    """The one line for a disk that filled mid-run (the folder keeps what was written)."""
    return KvbenchRunError(
        f"disk full while writing results ({err.strerror or err}); {folder} keeps what was "
        "written (unfinished)"
    )
