"""The same small sweep (2 strategies x 3 request rates, tiny model, CPU) with the local
executor and with Ray in local mode gives the same table apart from timings.

The tiny model runs for real on the CPU, so latencies, throughputs and everything the
arrival interleaving changes (utilization, preemptions, batch sizes) depend on the wall
clock; `timing_free` keeps the rest (ids, axes, status, served requests, KV capacity, ...).
Skipped without Ray (CI installs `.[dev]`, which does not pull Ray in).
"""

from __future__ import annotations

import pandas as pd
import pytest

from kvbench.results.run_folder import is_whole
from kvbench.sweep import SweepSpec, run_sweep, timing_free
from kvbench.sweep.local import LocalExecutor

ray = pytest.importorskip("ray")


def tiny_spec(out) -> SweepSpec:
    return SweepSpec(
        kind="run",
        base={"model": "tiny", "device": "cpu", "workload": "uniform",
              "workload-param": ["prompt_len=32", "output_len=12"], "num-requests": 6,
              "warmup": 0, "kv-memory": "8MiB"},
        axes={"strategy": ["contiguous", "paged"], "request-rate": [16, 64, "inf"]},
        out=str(out),
    )


def test_local_and_ray_executors_give_the_same_table(tmp_path):
    local = run_sweep(tiny_spec(tmp_path), tmp_path / "local", executor=LocalExecutor(1),
                      write_report=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        from kvbench.sweep.ray_executor import RayExecutor

        remote = run_sweep(tiny_spec(tmp_path), tmp_path / "ray", executor=RayExecutor(),
                           write_report=False)
    finally:
        ray.shutdown()
    assert len(local.points) == 6 and set(local.points["status"]) == {"complete"}
    pd.testing.assert_frame_equal(timing_free(local.points), timing_free(remote.points))
    for point_id in remote.points["point_id"]:
        folder = tmp_path / "ray" / point_id  # gathered from the worker onto the driver
        assert is_whole(folder)
        assert {"config.json", "requests.csv", "steps.csv"} <= {p.name for p in
                                                                  folder.iterdir()}
    on_disk = pd.read_csv(tmp_path / "ray" / "points.csv")
    assert list(on_disk["point_id"]) == list(local.points["point_id"])
