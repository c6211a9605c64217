"""Executors: where sweep points run, `local` (this machine) or `ray` (a Ray cluster).

The driver keeps up to `capacity` tasks in flight (`submit`) and takes their records back in
the order they finish (`wait_one`, the point's folder then on this machine's disk): a capacity
search bisects every group at once on Ray and one point at a time locally.
"""

from __future__ import annotations

from typing import Any, Protocol

from kvbench.errors import KvbenchInputError
from kvbench.sweep.local import LocalExecutor, default_jobs
from kvbench.sweep.ray_executor import RayExecutor


class Executor(Protocol):
    capacity: int

    def submit(self, task: dict[str, Any]) -> None: ...

    def wait_one(self) -> dict[str, Any]: ...

    def close(self, cancel: bool = False) -> None: ...


def make_executor(kind: str, *, address: str | None = None, jobs: int | None = None,
                  sweep_kind: str = "run", device: str = "auto") -> Executor:
    """`local` (sequential, or `jobs` processes; one per GPU when several are visible) or `ray`."""
    if kind == "local":
        jobs, gpus = default_jobs(sweep_kind, device) if jobs is None else (jobs, None)
        return LocalExecutor(jobs, gpus=gpus)
    if kind == "ray":
        if jobs is not None:
            raise KvbenchInputError("--jobs is for the local executor; Ray schedules by resources")
        return RayExecutor(address=address)
    raise KvbenchInputError(f"unknown --executor {kind!r} (choose local or ray)")
