"""The Ray executor (`--executor ray [--address auto]`): each point a Ray task, its folder's
files returned with its record. A task that raises or whose worker dies fails its point only.

Ray is optional (`pip install 'kvbench[ray]'`). Without `--address` a local Ray is started
and shut down at the end; `--address auto` (or `ray://...`) joins that cluster; a Ray already
initialised by the caller is used as it is and left running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.core.engine_kind import EngineKind
from kvbench.errors import optional_import
from kvbench.sweep.point import execute_point, failed_record, write_gathered


def _ray_point(task: dict[str, Any]) -> dict[str, Any]:
    return execute_point(task, gather=True)


class RayExecutor:
    capacity = 1 << 20  # Ray queues what the cluster cannot place yet

    def __init__(self, address: str | None = None) -> None:
        ray = self._ray = optional_import("ray", "--executor ray")
        self._owns = False
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            self._owns = True
        self._remote = ray.remote(_ray_point)
        self._has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        self._refs: dict[Any, dict[str, Any]] = {}

    def resources(self, task: dict[str, Any]) -> dict[str, Any]:
        """A real run: one GPU, or `cpu_threads` CPUs on the CPU or a cluster without GPUs;
        a simulated one: one CPU."""
        run = task["run"]
        engine = run["engine"]
        if run.get("engine_kind") == EngineKind.SIMULATED:
            return {"num_cpus": 1}
        device = str(engine.get("device", "auto"))
        if device == "cpu" or (device == "auto" and not self._has_gpus):
            return {"num_cpus": int(engine.get("cpu_threads") or 1)}
        return {"num_gpus": 1, "num_cpus": 1}

    def submit(self, task: dict[str, Any]) -> None:
        ref = self._remote.options(**self.resources(task)).remote(task)
        self._refs[ref] = task

    def wait_one(self) -> dict[str, Any]:
        ready, _ = self._ray.wait(list(self._refs), num_returns=1)
        ref = ready[0]
        task = self._refs.pop(ref)
        try:
            record = self._ray.get(ref)
        except Exception as err:  # noqa: BLE001 - RayTaskError, a lost worker, ...
            message = str(err).strip().splitlines()
            return failed_record(task, f"{type(err).__name__}: {message[-1] if message else ''}")
        files = record.pop("files", None)
        if files:
            write_gathered(Path(task["folder"]), files, bool(record.pop("whole", False)))
        return record

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self._refs:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort
                    pass
        self._refs.clear()
        if self._owns:
            self._ray.shutdown()
            self._owns = False
