"""Arrival processes: when each request of a workload arrives (docs/workloads.md, Arrival
processes).

Offline (`request_rate = inf`) keeps the workload's own offsets; a rate R with burstiness B
draws gaps ~ Gamma(shape = B, scale = 1/(R·B)) as vLLM's `benchmark_serving.py --burstiness`
(B = 1 is Poisson); `max_concurrency` is enforced by the runner. With conversations the process
gives each conversation's start and later requests keep their offset from it. Arrival times
come from their own seeded stream, so the rate never changes tokens or lengths."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads.sampling import rng_for


@dataclass(frozen=True)
class ArrivalProcess:
    """The `--request-rate` (or `--conversation-rate`), `--burstiness` and
    `--max-concurrency` of a run, validated."""

    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    conversation_rate: float = math.inf

    def __post_init__(self) -> None:
        for flag, name in (("--request-rate", "request_rate"),
                           ("--conversation-rate", "conversation_rate")):
            rate = getattr(self, name)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
                raise KvbenchInputError(f"{flag} must be > 0 or inf, got {rate!r}")
            object.__setattr__(self, name, float(rate))
        if not math.isinf(self.request_rate) and not math.isinf(self.conversation_rate):
            raise KvbenchInputError(
                "--request-rate and --conversation-rate both set the arrival rate: give one")
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, int | float) or not (0 < b < math.inf):
            raise KvbenchInputError(f"--burstiness must be a finite number > 0, got {b!r}")
        c = self.max_concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise KvbenchInputError(f"--max-concurrency must be an integer >= 1, got {c!r}")
        object.__setattr__(self, "burstiness", float(b))

    @property
    def offline(self) -> bool:
        return math.isinf(self.request_rate) and math.isinf(self.conversation_rate)

    def conversation_start_rate(self, num_conversations: int, num_requests: int) -> float:
        """Conversations started per second: `conversation_rate`, or the `request_rate` that
        makes requests arrive at that rate (inf offline)."""
        if not math.isinf(self.conversation_rate):
            return self.conversation_rate
        if num_conversations == num_requests or not num_requests:
            return self.request_rate
        return self.request_rate * num_conversations / num_requests


def arrival_times(
    num: int, request_rate: float = math.inf, burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """`num` non-decreasing arrival times in seconds, the first at 0."""
    process = ArrivalProcess(request_rate, burstiness)
    if process.offline or num == 0:
        return np.zeros(num)
    rng = rng_for(seed, "arrivals")
    gaps = rng.gamma(
        shape=process.burstiness,
        scale=1.0 / (process.request_rate * process.burstiness),
        size=num - 1,
    )
    return np.concatenate(([0.0], np.cumsum(gaps)))


def each_alone(requests: Sequence[Request]) -> bool:
    """Whether no request belongs to a conversation: each is a conversation of its own (most
    workloads, every trace), and its groups need no pass to find."""
    return all(r.conversation_id is None for r in requests)


def conversation_groups(requests: Sequence[Request]) -> list[list[int]]:
    """The indices of each conversation's requests, conversations in the order their first
    request appears (a request without a `conversation_id` is a conversation of one)."""
    groups: dict[object, list[int]] = {}
    for index, request in enumerate(requests):
        key = ("conversation", request.conversation_id)
        if request.conversation_id is None:
            key = ("request", index)
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def apply_arrivals(
    requests: Sequence[Request],
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    seed: int = 0,
    conversation_rate: float = math.inf,
) -> list[Request]:
    """The requests with arrival times from the process, sorted by arrival (stable).

    Offline leaves every `arrival_s` as the workload gave it. Otherwise each conversation (or
    each request without a `conversation_id`) gets a start time from the process, at
    `ArrivalProcess.conversation_start_rate`, and its requests arrive at start + (their
    `arrival_s` − the conversation's earliest `arrival_s`).
    """
    process = ArrivalProcess(request_rate, burstiness, conversation_rate=conversation_rate)
    if not process.offline and each_alone(requests):
        # Each request starts its own conversation, as the groups below would give it,
        # without a pass over groups of one.
        rate = process.conversation_start_rate(len(requests), len(requests))
        starts = arrival_times(len(requests), rate, process.burstiness, seed)
        # (start + (its arrival - its arrival): the general path's arithmetic, to the bit)
        requests = [replace(r, arrival_s=start + (r.arrival_s - r.arrival_s))
                    for start, r in zip(starts.tolist(), requests, strict=True)]
    elif not process.offline:
        groups = conversation_groups(requests)
        rate = process.conversation_start_rate(len(groups), len(requests))
        starts = arrival_times(len(groups), rate, process.burstiness, seed)
        retimed = list(requests)
        for start, members in zip(starts.tolist(), groups, strict=True):
            base = min(requests[i].arrival_s for i in members)
            for i in members:
                retimed[i] = replace(requests[i], arrival_s=start + (requests[i].arrival_s - base))
        requests = retimed
    return sorted(requests, key=lambda r: r.arrival_s)
