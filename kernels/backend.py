"""Attention backend selection for ``--attention-backend auto|triton|torch``:
``ops = get_ops(resolve_backend(name, device))``. Nothing here imports triton at import time.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from kvbench.errors import KvbenchInputError, missing_dependency

from .attention_ops import AttentionOps, TorchAttentionOps

BACKENDS = ("auto", "triton", "torch")


def triton_importable() -> bool:
    """Whether triton is installed (checked without importing it)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def interpreting() -> bool:
    """Whether Triton runs its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def resolve_backend(name: str, device: torch.device) -> str:
    """The concrete backend (``"triton"`` or ``"torch"``) for `name` on `device`.

    ``auto``: triton on CUDA when importable, torch otherwise. ``triton`` is an error when
    triton is missing, or on a CPU device unless ``TRITON_INTERPRET=1``.
    """
    device = torch.device(device)
    if name not in BACKENDS:
        raise KvbenchInputError(
            f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}"
        )
    if name == "torch":
        return "torch"
    has_triton = triton_importable()
    if name == "auto":
        return "triton" if device.type == "cuda" and has_triton else "torch"
    if not has_triton:
        raise missing_dependency("triton", "--attention-backend triton")
    if device.type == "cuda" or (device.type == "cpu" and interpreting()):
        return "triton"
    raise KvbenchInputError(
        f"attention backend 'triton' needs a CUDA device (got {device.type}); on the CPU it "
        "runs only under TRITON_INTERPRET=1 (slow), otherwise use --attention-backend torch"
    )


@functools.cache
def get_ops(name: str) -> AttentionOps:
    """The `AttentionOps` of a concrete backend (``"torch"`` or ``"triton"``), one per process.

    Raises `KvbenchInputError` naming what installs triton when it cannot be imported.
    """
    if name == "torch":
        return TorchAttentionOps()
    if name != "triton":
        raise KvbenchInputError(
            f"unknown concrete attention backend {name!r}; expected 'torch' or 'triton' "
            "(resolve 'auto' with resolve_backend first)"
        )
    try:
        from .triton_ops import TritonAttentionOps  # imports triton
    except ImportError as err:  # found, but not loadable here (its compiler, a driver)
        raise missing_dependency("triton", "the triton attention backend", err) from None
    return TritonAttentionOps()
