"""`get_gpu`: the GPU that `--gpu` names, a preset (`kvbench.simulator.gpus`) or a TOML file
(`kvbench.simulator.gpu_spec_file`)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.simulator.gpu_spec_file import load_gpu_spec
from kvbench.simulator.gpus import GPU_PRESETS, GPUSpec


def get_gpu(name: str | GPUSpec) -> GPUSpec:
    """A preset by name, or a `.toml` GPU file (a `GPUSpec` passes through)."""
    if isinstance(name, GPUSpec):
        return name
    if isinstance(name, str) and name.endswith(".toml"):
        return load_gpu_spec(name)
    try:
        return GPU_PRESETS[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown --gpu {name!r} (choose from {', '.join(GPU_PRESETS)}, "
            "or give --gpu-spec FILE.toml)"
        ) from None
