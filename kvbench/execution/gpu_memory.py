"""Device memory samples on CUDA (pynvml: device used; torch: allocated / reserved).

Off CUDA every figure is None: never made up. torch is imported only for a CUDA device, so a
run without one (`kvbench simulate`) never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from kvbench.core.executor import DeviceKind


def reset_peak_memory(device: torch.device | DeviceKind) -> None:
    """Start a new peak of torch's allocator on CUDA, so the next peak is this run's."""
    if device.type == "cuda":
        import torch  # only on CUDA

        torch.cuda.reset_peak_memory_stats(device)


def peak_allocated_bytes(device: torch.device | DeviceKind) -> int | None:
    """torch's allocator peak on CUDA since the last reset; None elsewhere."""
    if device.type != "cuda":
        return None
    import torch  # only on CUDA

    return torch.cuda.max_memory_allocated(device)


class GpuMemoryProbe:
    """A step's device memory figures on a CUDA device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._nvml = None
        import torch  # only on CUDA

        try:
            import pynvml  # only on CUDA

            pynvml.nvmlInit()
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML: device-level figure stays None
            self._handle = None

    def sample(self) -> dict[str, int | None]:
        import torch  # only on CUDA

        used = None
        if self._handle is not None:
            used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        return {
            "gpu_used_bytes": used,
            "torch_allocated_bytes": int(torch.cuda.memory_allocated(self.device)),
            "torch_reserved_bytes": int(torch.cuda.memory_reserved(self.device)),
        }
