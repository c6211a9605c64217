"""What changed in vLLM's start-up memory profile between releases (`--vllm-version`).

Each `VllmRelease` is one era of vLLM's V1 memory profiler (vllm/v1/worker/gpu_worker.py
`determine_available_memory`, vllm/utils/mem_utils.py `memory_profiling`), named by its first
release. Within an era the formula is the same; the eras differ in:

| era    | --gpu-memory-utilization default | sampler's working set per logit | non-torch growth, TP 1 / TP > 1 | CUDA graphs subtracted |
|--------|------|----------------------|------------------|-----|
| 0.11   | 0.9  | 36 B + the logits    | 0.13 / 0.55 GiB  | no  |
| 0.17   | 0.9  | 13 B + the logits    | 0.13 / 2.1 GiB   | no  |
| 0.18   | 0.9  | 13 B + the logits    | 0.25 / 2.1 GiB   | no  |
| 0.21   | 0.92 | 13 B + the logits    | 0.25 / 2.1 GiB   | yes (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`, on by default) |

- The sampler: the profile run ends with `_dummy_sampler_run` (vllm/v1/worker/gpu_model_runner.py)
  over `max_num_seqs` rows of logits with top-k and top-p on. Up to 0.16 its sort-based top-k /
  top-p kept float32 copies, int64 sort indices, the softmax and its cumulative sum alive
  together (~36 B a logit beside the logits themselves); from 0.17 ~13 B (float32 logits,
  int64 indices, a mask). Per logit, measured across the development rows of each era
  (tests/sizing/data), never one row: docs/estimate.md tables the error.
- Non-torch memory the profile run adds (cuBLAS workspaces; NCCL and custom all-reduce buffers
  under tensor parallelism): the growth vLLM logs as "non-torch forward increase memory".
- From 0.21 the worker captures a few CUDA graphs while profiling and subtracts their
  estimated pool (gpu_worker.py: "CUDA graph memory profiling is enabled (default since
  v0.21.0)"), and `gpu_memory_utilization` defaults to 0.92 to make room for it.

Releases before 0.11 (V0 engine) are read as 0.11, the oldest profiler modelled here.
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
