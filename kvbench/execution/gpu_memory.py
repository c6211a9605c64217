"""Device memory samples on CUDA (pynvml: device used; torch: allocated / reserved).

Off CUDA every figure is None: never made up.
"""

from __future__ import annotations

import torch


class GpuMemoryProbe:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._handle = None
        self._nvml = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML: device-level figure stays None
            self._handle = None

    def sample(self) -> dict[str, int | None]:
        if self.device.type != "cuda":
            return {"gpu_used_bytes": None, "torch_allocated_bytes": None,
                    "torch_reserved_bytes": None}
        used = None
        if self._handle is not None:
            used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        return {
            "gpu_used_bytes": used,
            "torch_allocated_bytes": int(torch.cuda.memory_allocated(self.device)),
            "torch_reserved_bytes": int(torch.cuda.memory_reserved(self.device)),
        }
