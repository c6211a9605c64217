"""`TensorExecutor`: an executor that computes logits with torch and samples them."""

from __future__ import annotations

from abc import abstractmethod

import torch

from kvbench.core.executor import Executor
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.execution.sampling import sample_rows


class TensorExecutor(Executor):
    """Computes a step's logits (`execute`); the engine's tokens are sampled from them."""

    device: torch.device

    @abstractmethod
    def execute(self, batch: StepBatch) -> torch.Tensor:
        """Logits `[len(batch.sample_rows), vocab]` (float32) for the rows to sample."""

    def execute_and_sample(self, batch: StepBatch, sampling: SamplingParams) -> list[list[int]]:
        return sample_rows(self.execute(batch), sampling)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
