"""`WorkloadResult`: a loaded workload, what the runner replays and reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench.core.request import Request
from kvbench.workloads.arrivals import ArrivalProcess
from kvbench.workloads.clip import clip_message


@dataclass(frozen=True)
class WorkloadResult:
    """A loaded workload: requests sorted by arrival, plus what the runner reports."""

    name: str  # built-in name or trace path
    requests: list[Request]
    num_clipped: int  # requests shortened to fit max_model_len
    max_model_len: int | None
    arrivals: ArrivalProcess
    params: Mapping[str, Any]  # the generator's parameters, defaults filled in ({} for traces)
    notes: tuple[str, ...] = ()  # what a trace reader left out (e.g. BurstGPT's failed rows)

    @property
    def max_concurrency(self) -> int | None:
        """Closed-loop limit for the runner to enforce (None: open loop)."""
        return self.arrivals.max_concurrency

    @property
    def clip_message(self) -> str | None:
        """"N of M requests clipped to --max-model-len L (...)", or None when none was."""
        if not self.num_clipped or self.max_model_len is None:
            return None
        return clip_message(self.num_clipped, len(self.requests), self.max_model_len)
