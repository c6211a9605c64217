"""GPU presets for `kvbench simulate`: memory, peak bf16 FLOP/s, HBM bandwidth, efficiencies.

Spec figures are the vendors' public datasheet numbers (NVIDIA product datasheets; the Ada
Lovelace architecture whitepaper for the RTX 4090), *dense* (no 2:4 sparsity):

| preset      | memory | bf16 dense   | memory bandwidth | source                           |
|-------------|--------|--------------|------------------|----------------------------------|
| `a100-40gb` | 40 GB  | 312 TFLOP/s  | 1,555 GB/s       | A100 datasheet, SXM4 40GB        |
| `a100-80gb` | 80 GB  | 312 TFLOP/s  | 2,039 GB/s       | A100 datasheet, SXM4 80GB        |
| `h100-80gb` | 80 GB  | 989 TFLOP/s  | 3.35 TB/s        | H100 datasheet, SXM5             |
| `h200`      | 141 GB | 989 TFLOP/s  | 4.8 TB/s         | H200 datasheet, SXM              |
| `l4`        | 24 GB  | 121 TFLOP/s  | 300 GB/s         | L4 datasheet                     |
| `rtx-4090`  | 24 GB  | 165.2 TFLOP/s| 1,008 GB/s       | Ada whitepaper, GeForce RTX 4090 |

Datasheets print the sparse figure for H100/H200/L4 (1,979 / 1,979 / 242 TFLOP/s "with
sparsity"); the dense figure is half of it. RTX 4090: the whitepaper gives 165.2 TFLOP/s for
BF16 tensor math with FP32 accumulate (the only accumulate BF16 has; FP16 with FP16 accumulate
is 330.3, and 82.6 is the TF32 / CUDA-core FP32 figure), so 165.2 is used.

Memory: the datasheet's "GB" is read as GiB (HBM and GDDR parts are binary-sized: an
A100 40GB reports 40,960 MiB in nvidia-smi). The driver and ECC keep a little of it (an L4
shows 23,034 MiB, an H100 80GB 81,559 MiB, an H200 143,771 MiB), which the simulator ignores;
`--gpu-memory-utilization` below 1 leaves room for that, as on a real GPU.

Float32 weights run on tensor cores as TF32, at half the bf16 rate on every preset here
(A100 156, H100/H200 495, L4 60, RTX 4090 82.6 TFLOP/s dense).

**Unvalidated**: the efficiency factors (`mfu`, `bandwidth_efficiency`, `step_overhead_s`)
are round guesses, not fitted. Until `kvbench simulate` is calibrated against measured step
times on a real GPU (same preset, same workload), treat simulated times as a roofline
estimate: the memory behaviour, admission, preemption and queueing are the real code's,
only the clock is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.errors import KvbenchInputError

GiB = 2**30
TERA = 10**12
GIGA = 10**9

# Unvalidated defaults (see the module docstring).
DEFAULT_MFU = 0.5  # share of peak FLOP/s a large prefill reaches
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8  # share of peak HBM bandwidth a decode step reaches
DEFAULT_STEP_OVERHEAD_S = 1e-3  # scheduler, input preparation, kernel launches per step


@dataclass(frozen=True)
class GPUSpec:
    """One GPU for the cost model. FLOP/s are dense (no sparsity), bytes are bytes."""

    name: str
    description: str
    memory_bytes: int
    peak_bf16_flops: float  # dense bf16/fp16 tensor FLOP/s (fp32 accumulate)
    hbm_bandwidth_bytes_s: float
    mfu: float = DEFAULT_MFU
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    step_overhead_s: float = DEFAULT_STEP_OVERHEAD_S

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0 or self.peak_bf16_flops <= 0 or self.hbm_bandwidth_bytes_s <= 0:
            raise KvbenchInputError(f"GPU {self.name}: memory, FLOP/s and bandwidth must be > 0")
        if not 0 < self.mfu <= 1 or not 0 < self.bandwidth_efficiency <= 1:
            raise KvbenchInputError(f"GPU {self.name}: efficiencies must be in (0, 1]")
        if self.step_overhead_s < 0:
            raise KvbenchInputError(f"GPU {self.name}: step overhead must not be negative")

    def peak_flops(self, weight_element_bytes: int) -> float:
        """Dense tensor FLOP/s for weights of that width: bf16/fp16 (2 B) or TF32 for fp32 (4 B)."""
        return self.peak_bf16_flops if weight_element_bytes <= 2 else self.peak_bf16_flops / 2

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "memory_bytes": self.memory_bytes,
            "peak_bf16_flops": self.peak_bf16_flops,
            "hbm_bandwidth_bytes_s": self.hbm_bandwidth_bytes_s,
            "mfu": self.mfu,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "step_overhead_s": self.step_overhead_s,
            "validated": False,
        }


GPU_PRESETS: dict[str, GPUSpec] = {
    spec.name: spec
    for spec in (
        # NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS (624 sparse); 40GB HBM2 1,555 GB/s.
        GPUSpec("a100-40gb", "NVIDIA A100 SXM4 40GB", 40 * GiB, 312 * TERA, 1555 * GIGA),
        # NVIDIA A100 datasheet: 80GB HBM2e, 2,039 GB/s (SXM).
        GPUSpec("a100-80gb", "NVIDIA A100 SXM4 80GB", 80 * GiB, 312 * TERA, 2039 * GIGA),
        # NVIDIA H100 datasheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity; HBM3 3.35 TB/s.
        GPUSpec("h100-80gb", "NVIDIA H100 SXM5 80GB", 80 * GiB, 989 * TERA, 3350 * GIGA),
        # NVIDIA H200 datasheet (SXM): BF16 1,979 TFLOPS with sparsity; 141GB HBM3e 4.8 TB/s.
        GPUSpec("h200", "NVIDIA H200 SXM 141GB", 141 * GiB, 989 * TERA, 4800 * GIGA),
        # NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity; 24GB GDDR6, 300 GB/s.
        GPUSpec("l4", "NVIDIA L4 24GB", 24 * GiB, 121 * TERA, 300 * GIGA),
        # Ada Lovelace whitepaper, RTX 4090: BF16 tensor (FP32 accumulate) 165.2 TFLOPS dense;
        # 24GB GDDR6X, 1,008 GB/s.
        GPUSpec("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24 * GiB, 165.2 * TERA, 1008 * GIGA),
    )
}


def get_gpu(name: str | GPUSpec) -> GPUSpec:
    """A preset by name (a `GPUSpec` passes through, so callers can give their own)."""
    if isinstance(name, GPUSpec):
        return name
    try:
        return GPU_PRESETS[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown --gpu {name!r} (choose from {', '.join(GPU_PRESETS)})"
        ) from None


__all__ = ["GPUSpec", "GPU_PRESETS", "get_gpu"]
