"""The local executor: points one after another in this process, or in `jobs` processes.

With several GPUs visible (and a `run` sweep not forced onto the CPU) it starts one process
per GPU, each pinned to its GPU with `CUDA_VISIBLE_DEVICES`, so points never share a device.
Processes are spawned (not forked): CUDA does not survive a fork.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from kvbench.sweep.point import execute_point, failed_record


def default_jobs(sweep_kind: str, device: str) -> tuple[int, list[str] | None]:
    """(processes, GPU ids to pin them to): one per visible GPU for real runs, else 1."""
    if sweep_kind != "run" or device == "cpu" or device.startswith("cuda:"):
        return 1, None
    try:
        import torch  # heavy: only a real-model sweep counts GPUs

        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no usable CUDA: run here
        return 1, None
    if count < 2:
        return 1, None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)]
    return count, ids[:count]


def _pin_worker(gpu_queue) -> None:
    if gpu_queue is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_queue.get()


class LocalExecutor:
    def __init__(self, jobs: int = 1, gpus: list[str] | None = None) -> None:
        self.capacity = max(1, jobs)
        self.gpus = gpus
        self._queue: deque[dict[str, Any]] = deque()
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, dict[str, Any]] = {}
        if self.capacity > 1:
            context = multiprocessing.get_context("spawn")
            gpu_queue = None
            if gpus:
                gpu_queue = context.Queue()
                for gpu in gpus:
                    gpu_queue.put(gpu)
            self._pool = ProcessPoolExecutor(self.capacity, mp_context=context,
                                             initializer=_pin_worker, initargs=(gpu_queue,))

    def submit(self, task: dict[str, Any]) -> None:
        if self._pool is None:
            self._queue.append(task)
        else:
            self._futures[self._pool.submit(execute_point, task)] = task

    def wait_one(self) -> dict[str, Any]:
        if self._pool is None:
            return execute_point(self._queue.popleft())
        done, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
        future = next(iter(done))
        task = self._futures.pop(future)
        try:
            return future.result()
        except Exception as err:  # noqa: BLE001 - a worker that died fails its point only
            return failed_record(task, f"{type(err).__name__}: {err}")

    def close(self, cancel: bool = False) -> None:
        self._queue.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=not cancel, cancel_futures=cancel)
            self._pool = None
