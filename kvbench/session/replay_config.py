"""`ReplayConfig`: how a run replays its workload's arrivals and what it records of them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvbench.errors import KvbenchInputError

# vLLM's API server's time per request outside the engine's steps (HTTP, tokenization, the
# hand-off to the engine core over ZMQ and back, detokenization, streaming), a CPU cost one
# constant on every GPU: fitted on the low-concurrency published serving runs
# (docs/simulator.md, "Checked against published serving runs").
SERVER_FRONTEND_LATENCY_MS = 17.0


@dataclass
class ReplayConfig:
    request_rate: float = math.inf  # requests/s, every workload; inf: all arrive at t=0
    # conversations started/s (a conversation workload's other way to give the rate); inf:
    # not given
    conversation_rate: float = math.inf
    burstiness: float = 1.0  # gamma arrivals shape (1 = Poisson)
    max_concurrency: int | None = None  # closed loop: at most this many in flight
    warmup: int = 2  # requests run first and excluded from every metric
    slo_ms: dict[str, float] = field(default_factory=dict)  # e.g. {"ttft": 500, "tpot": 50}
    trace: bool = False  # write trace.json
    steps_every: int = 1  # steps.csv keeps every Nth step (summary: all of them)
    # Run decode runs in one move where the engine can (the simulator): the same results.
    fast_forward: bool = True
    # Milliseconds from a request's send to the engine's scheduler (a server's front end:
    # HTTP, tokenization, the hand-off to the engine and back); 0: none. `kvbench simulate`
    # takes `SERVER_FRONTEND_LATENCY_MS`, `kvbench run` has no server and adds none.
    frontend_latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise KvbenchInputError(f"--warmup must be 0 or more, got {self.warmup}")
        if not 0 <= self.frontend_latency_ms < math.inf:
            raise KvbenchInputError(
                f"--frontend-latency-ms must be 0 or more, got {self.frontend_latency_ms}")
        if self.steps_every < 1:
            raise KvbenchInputError(f"--steps-every must be at least 1, got {self.steps_every}")
