"""The `Executor` seam: runs a `StepBatch`; owns tensors, never decides allocation."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from kvbench.core.step_batch import StepBatch


class Executor(ABC):
    device: torch.device = torch.device("cpu")

    @abstractmethod
    def execute(self, batch: StepBatch) -> torch.Tensor:
        """Logits `[len(batch.sample_rows), vocab]` (float32) for the rows to sample."""

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
