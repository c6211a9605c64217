"""`WorkloadConfig`: which requests a run replays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench.errors import KvbenchInputError


@dataclass
class WorkloadConfig:
    # `config.json` keeps the flat names of the options (metadata "json").
    name: str = field(default="chat", metadata={"json": "workload"})  # built-in or trace file
    num_requests: int | None = None  # None: the workload's default (whole file for a trace)
    params: dict[str, Any] = field(default_factory=dict, metadata={"json": "workload_params"})
    time_scale: float = 1.0  # multiplies the workload's own arrival times (trace timestamps)
    tokenizer: str | None = None  # Hugging Face tokenizer folder (ShareGPT JSON datasets)

    def __post_init__(self) -> None:
        if self.num_requests is not None and self.num_requests < 1:
            raise KvbenchInputError(
                f"--num-requests must be an integer >= 1, got {self.num_requests}"
            )
