"""`RunConfig`: an engine configuration plus the workload and how to replay it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError


@dataclass
class RunConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    workload: str = "chat"
    num_requests: int | None = None  # None: the workload's default (whole file for a trace)
    workload_params: dict[str, Any] = field(default_factory=dict)
    time_scale: float = 1.0  # multiplies the workload's own arrival times (trace timestamps)
    tokenizer: str | None = None  # Hugging Face tokenizer folder (ShareGPT JSON datasets)
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 2
    slo_ms: dict[str, float] = field(default_factory=dict)  # e.g. {"ttft": 500, "tpot": 50}
    trace: bool = False
    steps_every: int = 1  # steps.csv keeps every Nth step (summary: all of them)
    engine_kind: str = "kvbench"  # kvbench | hf | simulated
    gpu: str | None = None  # simulated executor's GPU preset

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise KvbenchInputError(f"--warmup must be 0 or more, got {self.warmup}")
        if self.steps_every < 1:
            raise KvbenchInputError(f"--steps-every must be at least 1, got {self.steps_every}")
        if self.num_requests is not None and self.num_requests < 1:
            raise KvbenchInputError(
                f"--num-requests must be an integer >= 1, got {self.num_requests}"
            )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return data
