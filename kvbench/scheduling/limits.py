"""`SchedulerLimits`: the engine options every batching policy obeys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = False
    preemption_mode: str = "recompute"
