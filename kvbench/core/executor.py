"""The `Executor` seam: runs a `StepBatch`; owns tensors, never decides allocation.

This module does not import torch: a simulated executor runs no tensor, and `kvbench simulate`
never loads torch (docs/design.md). Executors that compute import it themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbench.core.host_transfers import HostTransfers
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.errors import KvbenchInputError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DeviceKind:
    """A device where there is no torch device: only its `type`, as `torch.device.type`."""

    type: str

    def __str__(self) -> str:
        return self.type


class Executor(ABC):
    """Runs a step and samples its next tokens: the engine sees token ids, never tensors.

    An executor that computes logits derives from `kvbench.execution.TensorExecutor`, which
    samples them; a simulated one returns tokens without computing anything.
    """

    # A torch.device for an executor that computes; `DeviceKind` for one that does not.
    device: torch.device | DeviceKind = DeviceKind("cpu")
    # Whether the step reads `StepBatch.input_ids` / `positions`: the engine builds those
    # per-token lists only for an executor that does (a simulated one needs the lengths).
    reads_token_inputs: bool = True
    # Whether the step reads the KV tables (`KVLayout.table_log`, slot mappings): a strategy
    # under an executor that does not (a simulated one: lengths only) keeps no table log.
    reads_kv_tables: bool = True
    # Trace ranges the engine opens whose time this executor models rather than takes, and
    # so draws in the Chrome trace itself (a simulated one: its clock moves only by modelled
    # time); none for an executor that computes.
    drawn_trace_ranges: frozenset[str] = frozenset()
    @abstractmethod
    def execute_and_sample(self, batch: StepBatch, sampling: SamplingParams) -> list[list[int]]:
        """Run the step; `[i][j]` is the token of `sampling.keys[i][j]` from sample row `i`."""

    def synchronize(self) -> None:  # noqa: B027 (a hook with nothing to do by default)
        """Wait for the device's queued work (nothing to wait for by default)."""

    # A host tier (`HostTransfers`): an executor that keeps one performs a step's copies as
    # `execute` reads them from the layout, or here for a step that computes nothing.
    def keep_host_tier(self, num_blocks: int, block_size: int, block_bytes: int) -> None:
        """Hold a host tier of `num_blocks` blocks of `block_size` slots, `block_bytes` each
        across the tensor-parallel group (`--kv-offload`)."""
        raise KvbenchInputError(f"--kv-offload: {type(self).__name__} keeps no host KV tier")

    def transfer_host(self, transfers: HostTransfers) -> None:
        """Start `transfers` now (before any KV the step writes)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no host KV tier")

    def finished_host_jobs(self) -> list[int]:
        """Host-tier jobs done since the last call (none without a host tier)."""
        return []

    def wait_host_jobs(self) -> None:  # noqa: B027 (nothing is ever in flight by default)
        """Wait until some host-tier job in flight is done (an idle engine whose sequences
        wait for their KV)."""

    def reset_stats(self) -> None:  # noqa: B027 (nothing is kept by default)
        """After a warm-up, with no host job in flight: the run proper starts on a clock
        back at zero, so forget what was timed on the warm-up's clock."""
