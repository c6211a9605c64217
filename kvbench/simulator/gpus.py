"""GPU presets for `kvbench simulate`: datasheet figures, interconnects and step-time constants.

docs/simulator.md ("Calibration sources", "Host link") tables every figure and its source; each
preset below cites its datasheet. FLOP/s are *dense* (no 2:4 sparsity: half the "with
sparsity" figure NVIDIA datasheets print for H100/H200/L4/B200); float32 weights run on
tensor cores as TF32, at half the bf16 rate. The datasheet's "GB" is read as GiB, and
`cuda_memory_bytes` is the total CUDA reports (`torch.cuda.mem_get_info`, what vLLM's
`--gpu-memory-utilization` multiplies: the totals PyTorch's out-of-memory messages and vLLM's
start-up logs show on those cards), None where not known (`reported_memory_bytes`).

Step-time constants (`kvbench.simulator.step_time`) are fitted by
`scripts/simulator_calibration.py` on Vidur's vLLM kernel profiles of A100-80GB and H100-80GB;
the other presets borrow them (`calibrated: False`), the GDDR cards with their own weight-read
rate (`GDDR_CONSTANTS`). A user's own GPU comes from a TOML file (`gpu_spec_file.py`);
`kvbench.simulator.gpu_lookup.get_gpu` finds a GPU by either name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvbench.errors import KvbenchInputError
from kvbench.simulator.host_link import (
    GIGA,
    NVLINK_C2C_HOST,
    PCIE3_HOST,
    PCIE4_HOST,
    PCIE5_HOST,
    US,
    HostLink,
)
from kvbench.simulator.step_time import Interconnect, StepTimeConstants

GiB = 2**30
TERA = 10**12

# Ring all-reduce links. NVLink figures: fitted on Vidur's NCCL all-reduce profiles inside a
# DGX node, 16 KiB to 64 MiB, 2/4/8 GPUs (scripts/simulator_calibration.py --fit): bus
# bandwidth, latency per ring step, fixed cost per call (NCCL through torch.distributed,
# no CUDA graphs: a custom all-reduce in a graph-captured engine pays less per call).
NVLINK3 = Interconnect("nvlink3", 149 * GIGA, 0.0, 31 * US)  # A100 SXM: 600 GB/s both ways
NVLINK4 = Interconnect("nvlink4", 342 * GIGA, 1.3 * US, 17 * US)  # H100/H200: 900 GB/s
# PCIe: 80% of one direction of a x16 link (Gen4 32 GB/s, Gen5 64 GB/s), through the host;
# latencies: NVLink 3's call cost plus 10 us per ring step (not measured here).
PCIE4 = Interconnect("pcie4", 25.6 * GIGA, 10 * US, 31 * US)
PCIE5 = Interconnect("pcie5", 51.2 * GIGA, 10 * US, 31 * US)
PCIE3 = Interconnect("pcie3", 12.8 * GIGA, 10 * US, 31 * US)
# Not measured here: NVLink 4's fitted share of its datasheet rate (342 of 900 GB/s both ways)
# applied to NVLink 5 (B200: 1.8 TB/s both ways) and to the MI300X's Infinity Fabric (7 peer
# links x 128 GB/s = 896 GB/s), with NVLink 4's latencies.
NVLINK5 = Interconnect("nvlink5", 684 * GIGA, 1.3 * US, 17 * US)
INFINITY_FABRIC = Interconnect("infinity-fabric", 340 * GIGA, 1.3 * US, 17 * US)
INTERCONNECTS = {link.name: link
                 for link in (NVLINK3, NVLINK4, NVLINK5, INFINITY_FABRIC, PCIE3, PCIE4,
                                 PCIE5)}

# Fitted on Vidur's A100-80GB profiles (Llama-2-7B/70B matmuls and elementwise ops at TP 1-4,
# flash-attention of Llama-2-70B at TP 2); see docs/simulator.md.
A100_CONSTANTS = StepTimeConstants(
    gemm_peak_efficiency=0.75,
    gemm_half_tokens=60.0,
    gemm_bandwidth_efficiency=0.80,
    gemm_launch_s=6 * US,
    attn_decode_bandwidth_efficiency=0.72,
    attn_decode_floor_s=16 * US,
    attn_decode_per_seq_s=0.019 * US,
    attn_prefill_efficiency=0.335,
    attn_prefill_floor_s=4 * US,
    attn_prefill_per_token_s=0.099 * US,
    elementwise_bandwidth_efficiency=0.55,
    elementwise_floor_s=4 * US,
    cpu_overhead_s=1e-3,
)
# Fitted on Vidur's H100-80GB profiles (matmuls, elementwise); attention: A100's efficiencies
# (no public H100 attention profile), so only the fitted constants differ. The sustained
# compute fraction is fitted on published vLLM runs of Qwen3-14B on one H100 SXM, whose
# prefill-bound throughput is 0.55x what the kernel profiles give (docs/simulator.md,
# "Checked against published serving runs"); the A100 runs of the same source need none.
H100_CONSTANTS = replace(
    A100_CONSTANTS,
    gemm_half_tokens=80.0,
    gemm_bandwidth_efficiency=0.90,
    elementwise_bandwidth_efficiency=0.69,
    elementwise_floor_s=3.2 * US,
    sustained_compute_fraction=0.55,
)
# GDDR cards (L4, L40S, A10G, T4, RTX 3090 and 4090): no kernel profile of their own, so the
# A100's kernel fit (the same generations of tensor-core instructions on the Ampere and Ada
# cards) but their own weight-read rate: published decode-bound serving runs of an RTX 4090
# (Mistral-7B) and an L4 (Qwen2.5-0.5B) stream the weights at 0.9 of the datasheet bandwidth,
# not the 0.80 of the A100's HBM2e profile (docs/simulator.md, runs 12-17). Fitted on those two
# cards; the other GDDR cards take it unmeasured.
GDDR_CONSTANTS = replace(A100_CONSTANTS, gemm_bandwidth_efficiency=0.90)


@dataclass(frozen=True)
class GPUSpec:
    """One GPU for the step-time model. FLOP/s are dense (no sparsity), bytes are bytes."""

    name: str
    description: str
    memory_bytes: int
    peak_bf16_flops: float  # dense bf16/fp16 tensor FLOP/s (fp32 accumulate)
    hbm_bandwidth_bytes_s: float
    constants: StepTimeConstants = field(default_factory=StepTimeConstants)
    interconnect: Interconnect | None = None
    peak_fp8_flops: float | None = None  # dense; None: no FP8 tensor cores
    calibrated: bool = False  # constants fitted on measurements of this GPU type
    cuda_memory_bytes: int | None = None  # the total CUDA reports; None: not known here
    host_link: HostLink | None = None  # to host memory (a host KV tier); None: not known

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0 or self.peak_bf16_flops <= 0 or self.hbm_bandwidth_bytes_s <= 0:
            raise KvbenchInputError(f"GPU {self.name}: memory, FLOP/s and bandwidth must be > 0")
        if self.peak_fp8_flops is not None and self.peak_fp8_flops <= 0:
            raise KvbenchInputError(f"GPU {self.name}: fp8 FLOP/s must be > 0")

    @property
    def reported_memory_bytes(self) -> int:
        """The total memory CUDA reports (what vLLM's utilization multiplies), or the
        datasheet's where that is not known."""
        return self.cuda_memory_bytes or self.memory_bytes

    def peak_flops(self, weight_element_bytes: int) -> float:
        """Dense tensor FLOP/s for weights of that width: fp8 (1 B), bf16/fp16 (2 B), TF32 (4 B)."""
        if weight_element_bytes == 1 and self.peak_fp8_flops:
            return self.peak_fp8_flops
        return self.peak_bf16_flops if weight_element_bytes <= 2 else self.peak_bf16_flops / 2

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "memory_bytes": self.memory_bytes,
            "cuda_memory_bytes": self.cuda_memory_bytes,
            "peak_bf16_flops": self.peak_bf16_flops,
            "peak_fp8_flops": self.peak_fp8_flops,
            "hbm_bandwidth_bytes_s": self.hbm_bandwidth_bytes_s,
            "interconnect": self.interconnect.to_dict() if self.interconnect else None,
            "host_link": self.host_link.to_dict() if self.host_link else None,
            "constants": self.constants.to_dict(),
            "validated": self.calibrated,
        }


def _gpu(name, description, memory, bf16, bandwidth, link, constants, fp8=None, calibrated=False,
         cuda_gib=None, host=None):
    cuda = round(cuda_gib * GiB) if cuda_gib is not None else None
    return GPUSpec(name, description, memory, bf16, bandwidth, constants, link, fp8, calibrated,
                   cuda, host)


GPU_PRESETS: dict[str, GPUSpec] = {
    spec.name: spec
    for spec in (
        # NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS (624 sparse); 40GB HBM2 1,555 GB/s.
        _gpu("a100-40gb", "NVIDIA A100 SXM4 40GB", 40 * GiB, 312 * TERA, 1555 * GIGA,
             NVLINK3, A100_CONSTANTS, cuda_gib=39.39, host=PCIE4_HOST),
        # NVIDIA A100 datasheet: 80GB HBM2e, 2,039 GB/s (SXM).
        _gpu("a100-80gb", "NVIDIA A100 SXM4 80GB", 80 * GiB, 312 * TERA, 2039 * GIGA,
             NVLINK3, A100_CONSTANTS, calibrated=True, cuda_gib=79.15, host=PCIE4_HOST),
        # NVIDIA H100 datasheet (SXM): BF16 1,979 / FP8 3,958 TFLOPS with sparsity; 3.35 TB/s.
        _gpu("h100-80gb", "NVIDIA H100 SXM5 80GB", 80 * GiB, 989 * TERA, 3350 * GIGA,
             NVLINK4, H100_CONSTANTS, fp8=1979 * TERA, calibrated=True, cuda_gib=79.19,
             host=PCIE5_HOST),
        # Before h200: calibrate's name match would take "GH200" for an H200.
        # NVIDIA GH200 Grace Hopper datasheet: H100 with 96GB HBM3, 4 TB/s; BF16 1,979 / FP8
        # 3,958 TFLOPS with sparsity; NVLink-C2C to the Grace CPU, 900 GB/s both ways.
        _gpu("gh200", "NVIDIA GH200 Grace Hopper 96GB", 96 * GiB, 989 * TERA, 4000 * GIGA,
             NVLINK4, H100_CONSTANTS, fp8=1979 * TERA, host=NVLINK_C2C_HOST),
        # NVIDIA H200 datasheet (SXM): BF16 1,979 TFLOPS with sparsity; 141GB HBM3e 4.8 TB/s.
        _gpu("h200", "NVIDIA H200 SXM 141GB", 141 * GiB, 989 * TERA, 4800 * GIGA,
             NVLINK4, H100_CONSTANTS, fp8=1979 * TERA, host=PCIE5_HOST),
        # NVIDIA L4 datasheet: BF16 242 / FP8 485 TFLOPS with sparsity; 24GB GDDR6, 300 GB/s.
        _gpu("l4", "NVIDIA L4 24GB", 24 * GiB, 121 * TERA, 300 * GIGA,
             PCIE4, GDDR_CONSTANTS, fp8=242 * TERA, host=PCIE4_HOST),
        # Ada Lovelace whitepaper, RTX 4090: BF16 tensor (FP32 accumulate) 165.2 TFLOPS dense,
        # FP8 (FP32 accumulate) 330.3; 24GB GDDR6X, 1,008 GB/s.
        _gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24 * GiB, 165.2 * TERA, 1008 * GIGA,
             PCIE4, GDDR_CONSTANTS, fp8=330.3 * TERA, cuda_gib=23.65, host=PCIE4_HOST),
        # NVIDIA DGX B200 datasheet, per GPU of 8: 180GB HBM3e, 8 TB/s (64 TB/s in all), FP8
        # 9 PFLOPS with sparsity; HGX B200: FP16/BF16 4.5 PFLOPS with sparsity; NVLink 5.
        _gpu("b200", "NVIDIA B200 180GB", 180 * GiB, 2250 * TERA, 8000 * GIGA,
             NVLINK5, H100_CONSTANTS, fp8=4500 * TERA, host=PCIE5_HOST),
        # AMD Instinct MI300X data sheet: 192GB HBM3, 5.3 TB/s, BF16 1,307.4 / FP8 2,614.9
        # TFLOPS dense (twice that with sparsity), Infinity Fabric 896 GB/s peer-to-peer.
        _gpu("mi300x", "AMD Instinct MI300X 192GB", 192 * GiB, 1307.4 * TERA, 5300 * GIGA,
             INFINITY_FABRIC, H100_CONSTANTS, fp8=2614.9 * TERA, cuda_gib=191.98,
             host=PCIE5_HOST),
        # NVIDIA H20 (Hopper for the Chinese market; no datasheet on nvidia.com): 96GB HBM3,
        # 4.0 TB/s, BF16 148 / FP8 296 TFLOPS dense, NVLink 4 (900 GB/s).
        _gpu("h20", "NVIDIA H20 96GB", 96 * GiB, 148 * TERA, 4000 * GIGA,
             NVLINK4, H100_CONSTANTS, fp8=296 * TERA, host=PCIE5_HOST),
        # NVIDIA L40S datasheet: BF16 733 / FP8 1,466 TFLOPS with sparsity; 48GB GDDR6, 864 GB/s.
        _gpu("l40s", "NVIDIA L40S 48GB", 48 * GiB, 366.5 * TERA, 864 * GIGA,
             PCIE4, GDDR_CONSTANTS, fp8=733 * TERA, host=PCIE4_HOST),
        # NVIDIA A10 datasheet (AWS's A10G is its variant): BF16 125 TFLOPS dense; 24GB GDDR6,
        # 600 GB/s.
        _gpu("a10g", "NVIDIA A10G 24GB", 24 * GiB, 125 * TERA, 600 * GIGA,
             PCIE4, GDDR_CONSTANTS, cuda_gib=22.20, host=PCIE4_HOST),
        # NVIDIA T4 datasheet: FP16 tensor 65 TFLOPS (no bf16, no sparsity figure); 16GB GDDR6,
        # 320 GB/s; PCIe 3 x16.
        _gpu("t4", "NVIDIA T4 16GB", 16 * GiB, 65 * TERA, 320 * GIGA,
             PCIE3, GDDR_CONSTANTS, cuda_gib=14.75, host=PCIE3_HOST),
        # NVIDIA Ampere GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 accumulate 71
        # TFLOPS dense; 24GB GDDR6X, 936 GB/s.
        _gpu("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24 * GiB, 71 * TERA, 936 * GIGA,
             PCIE4, GDDR_CONSTANTS, cuda_gib=23.69, host=PCIE4_HOST),
    )
}

DEFAULT_GPU = "a100-80gb"  # the preset of `kvbench simulate` and `kvbench estimate --step`
