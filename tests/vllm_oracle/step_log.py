"""What one step of either scheduler is compared by, and where two runs first differ."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StepLog:
    step: int
    # (request, tokens scheduled, tokens computed before this step), in schedule order
    scheduled: tuple[tuple[int, int, int], ...]
    # (request, tokens served by the prefix cache) of each request admitted (or resumed)
    admitted: tuple[tuple[int, int], ...]
    preempted: tuple[int, ...]  # in the order the scheduler preempted them
    blocks_held: int  # pool blocks with a holder after the step (cached free blocks are free)
    first_token: tuple[int, ...]  # requests whose first output token this step produced
    finished: tuple[int, ...]


FIELDS = ("scheduled", "admitted", "preempted", "blocks_held", "first_token", "finished")


def first_difference(ours: list[StepLog], theirs: list[StepLog]) -> str | None:
    """None where both runs agree in every step; else the first differing step, what differs
    in it, and both records (kvbench's as `kvbench`, vLLM's as `vllm`)."""
    for a, b in zip(ours, theirs, strict=False):
        fields = [f for f in FIELDS if getattr(a, f) != getattr(b, f)]
        if fields:
            lines = [f"step {a.step}: {', '.join(fields)} differ"]
            for f in fields:
                lines.append(f"  {f}: kvbench {getattr(a, f)} / vllm {getattr(b, f)}")
            return "\n".join(lines)
    if len(ours) != len(theirs):
        return (f"step {min(len(ours), len(theirs))}: kvbench ran {len(ours)} steps, "
                f"vllm {len(theirs)}")
    return None


def summary(logs: list[StepLog]) -> dict[str, int]:
    """Totals of a run: steps, preemptions, tokens served from the prefix cache, peak blocks."""
    return {
        "steps": len(logs),
        "preemptions": sum(len(s.preempted) for s in logs),
        "hit_tokens": sum(h for s in logs for _, h in s.admitted),
        "peak_blocks": max((s.blocks_held for s in logs), default=0),
        "last_finish": max((s.step for s in logs if s.finished), default=-1),
    }


def as_dicts(logs: list[StepLog]) -> list[dict]:
    return [asdict(s) for s in logs]
