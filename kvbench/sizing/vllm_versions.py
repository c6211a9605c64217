"""What changed in vLLM's start-up memory profile between releases (`--vllm-version`).

Each `VllmRelease` is one era of vLLM's V1 memory profiler (vllm/v1/worker/gpu_worker.py
`determine_available_memory`), named by its first release; docs/estimate.md ("Versions")
tables what differs: the default utilization, the dummy sampler's working set per logit
(measured across each era's development rows in tests/sizing/data, never one row), the
non-torch growth, and whether CUDA graphs are subtracted (from 0.21). Releases before 0.11
(V0 engine) are read as 0.11.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.errors import KvbenchInputError

GiB = 2**30


@dataclass(frozen=True)
class VllmRelease:
    """One era of vLLM's start-up memory profile."""

    name: str  # the first release of the era, e.g. "0.19"
    default_utilization: str  # `--gpu-memory-utilization` when not given, as vLLM writes it
    sampler_bytes_per_logit: int  # the dummy sampler's working set beyond the logits
    non_torch_bytes_tp1: int
    non_torch_bytes_tp: int  # under tensor parallelism (NCCL, custom all-reduce)
    subtracts_cuda_graphs: bool


RELEASES = (
    VllmRelease("0.11", "0.9", 36, int(0.13 * GiB), int(0.55 * GiB), False),
    VllmRelease("0.17", "0.9", 13, int(0.13 * GiB), int(2.1 * GiB), False),
    VllmRelease("0.18", "0.9", 13, int(0.25 * GiB), int(2.1 * GiB), False),
    VllmRelease("0.21", "0.92", 13, int(0.25 * GiB), int(2.1 * GiB), True),
)
CURRENT = RELEASES[-1]  # the default: vLLM's current profiler


def vllm_release(version: str | None) -> VllmRelease:
    """The era of `--vllm-version` ("0.19", "0.19.1", "v0.11.0"); None: the current one."""
    if version is None:
        return CURRENT
    text = str(version).strip().lstrip("vV")
    try:
        major, minor = (int(part) for part in text.split(".")[:2])
    except ValueError:
        raise KvbenchInputError(
            f"--vllm-version takes a release such as 0.19 or 0.11.0, got {version!r}"
        ) from None
    era = RELEASES[0]
    for release in RELEASES:
        era_major, era_minor = (int(part) for part in release.name.split("."))
        if (major, minor) >= (era_major, era_minor):
            era = release
    return era
