"""The `Executor` seam: runs a `StepBatch`; owns tensors, never decides allocation."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.execution.sampling import sample_rows


class Executor(ABC):
    """Runs a step and samples its next tokens: the engine sees token ids, never tensors."""

    device: torch.device = torch.device("cpu")
    # Whether `execute` reads `StepBatch.input_ids` / `positions`: the engine builds those
    # per-token lists only for an executor that does (a simulated one needs the lengths).
    reads_token_inputs: bool = True

    @abstractmethod
    def execute(self, batch: StepBatch) -> torch.Tensor:
        """Logits `[len(batch.sample_rows), vocab]` (float32) for the rows to sample."""

    def execute_and_sample(self, batch: StepBatch, sampling: SamplingParams) -> list[list[int]]:
        """Run the step; `[i][j]` is the token of `sampling.keys[i][j]` from sample row `i`."""
        return sample_rows(self.execute(batch), sampling)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
