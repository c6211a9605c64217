"""Choosing the device and describing it for `config.json`."""

from __future__ import annotations

import platform

import torch

from kvbench.errors import KvbenchInputError
from kvbench.models.loader import parse_dtype


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


def resolve_dtype(name: str, device: torch.device | str) -> str:
    """`--dtype auto` as vLLM reads it: bfloat16 on CUDA (float16 where the GPU has no
    bfloat16), float32 on the CPU, where bfloat16 matmuls are slow and float32 is exact.
    Any other name is returned as the canonical name of its dtype.
    """
    device = torch.device(device)
    if name == "auto":
        if device.type != "cuda":
            return "float32"
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return str(parse_dtype(name)).removeprefix("torch.")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"cpu ({platform.processor() or platform.machine()}, {threads} thread{'s' * (threads > 1)})"
