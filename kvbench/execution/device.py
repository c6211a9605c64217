"""Choosing the device and describing it for `config.json`."""

from __future__ import annotations

import platform

import torch

from kvbench.errors import KvbenchInputError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise KvbenchInputError(f"unknown --device {name!r} (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise KvbenchInputError("--device cuda asked for, but no CUDA device is available")
    return device


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"cpu ({platform.processor() or platform.machine()}, {threads} thread{'s' * (threads > 1)})"
