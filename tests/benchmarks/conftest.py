"""Benchmarks' machine record: the GPU model in pytest-benchmark's `machine_info`, so that
scripts/benchmark_gate.py holds a run only to a baseline from the same model."""

from __future__ import annotations


def pytest_benchmark_update_machine_info(config, machine_info):
    # torch: only when benchmarks run, for the device's name
    import torch

    machine_info["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
