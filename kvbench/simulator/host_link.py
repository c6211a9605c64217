"""`HostLink`: the link between a GPU and its host's memory, the path of a host KV tier.

Each GPU preset carries one (`GPUSpec.host_link`). Figures are *effective* rates of
pinned-memory copies by the copy engines (cudaMemcpyAsync, the DMA path vLLM's CPU offloading
uses), per direction, as published measurements report them, not the link's signalling rate;
docs/simulator.md, "Host link", tables and cites each. The fixed cost of a transfer
(`latency_s`) and of each contiguous piece it copies (`fragment_overhead_s`) are not measured
here: see `kvbench.simulator.host_transfer` for how they enter a transfer's time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvbench.errors import KvbenchInputError

GIGA = 10**9
US = 1e-6


@dataclass(frozen=True)
class HostLink:
    """One GPU's link to host memory: effective pinned-copy bandwidth per direction (bytes/s),
    a fixed cost per transfer and a cost per contiguous fragment a transfer copies."""

    name: str
    description: str
    load_bytes_s: float  # host -> GPU (a host-tier hit loaded back)
    store_bytes_s: float  # GPU -> host (a block stored to the host tier)
    latency_s: float = 10 * US  # per transfer: submission and completion of one batched copy
    fragment_overhead_s: float = 2 * US  # per contiguous piece copied (one DMA descriptor)

    def __post_init__(self) -> None:
        if self.load_bytes_s <= 0 or self.store_bytes_s <= 0:
            raise KvbenchInputError(f"host link {self.name}: bandwidths must be > 0")
        if self.latency_s < 0 or self.fragment_overhead_s < 0:
            raise KvbenchInputError(f"host link {self.name}: latencies must be >= 0")

    def bandwidth(self, direction: str) -> float:
        """Bytes/s of a "load" (host to GPU) or a "store" (GPU to host)."""
        if direction == "load":
            return self.load_bytes_s
        if direction == "store":
            return self.store_bytes_s
        raise ValueError(f"direction must be 'load' or 'store', got {direction!r}")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# PCIe 3.0 x16 (8 GT/s, 128b/130b: 15.75 GB/s one way). CUDA bandwidthTest on a T4 (pinned,
# 32 MB): 9.7 GB/s host to device, 11.1 GB/s device to host.
PCIE3_HOST = HostLink("pcie3", "PCIe 3.0 x16", 9.7 * GIGA, 11.1 * GIGA)
# PCIe 4.0 x16 (16 GT/s: 31.5 GB/s one way). 25 GB/s measured peak on an A100 (the BaM paper's
# figure, its authors: "it is measured peak"), and nvbandwidth's device-to-host ~25 GB/s on
# A100 SXM4 80GB nodes.
PCIE4_HOST = HostLink("pcie4", "PCIe 4.0 x16", 25 * GIGA, 25 * GIGA)
# PCIe 5.0 x16 (32 GT/s: 63 GB/s one way). nvbandwidth host_to_device_memcpy_ce 55.63 GB/s;
# device_to_host on an H100 node 52.77 GB/s.
PCIE5_HOST = HostLink("pcie5", "PCIe 5.0 x16", 55.6 * GIGA, 52.8 * GIGA)
# NVLink-C2C (GH200, GB200: 900 GB/s both ways, 450 GB/s one way). nvbandwidth on a GH200:
# host_to_device_memcpy_ce 346 GB/s, device to host about 15% lower.
NVLINK_C2C_HOST = HostLink("nvlink-c2c", "NVLink-C2C (Grace)", 346 * GIGA, 300 * GIGA)

HOST_LINKS: dict[str, HostLink] = {
    link.name: link for link in (PCIE3_HOST, PCIE4_HOST, PCIE5_HOST, NVLINK_C2C_HOST)
}
