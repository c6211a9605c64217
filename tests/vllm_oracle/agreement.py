"""Both schedulers over every trace and strategy; the comparison the test and the table read.

    $VLLM_ORACLE_VENV/bin/python -m tests.vllm_oracle.agreement   # the table of docs/vllm_oracle.md
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from kvbench.errors import KvbenchInputError
from tests.vllm_oracle import kvbench_side, vllm_side
from tests.vllm_oracle.step_log import StepLog, first_difference, summary
from tests.vllm_oracle.traces import TRACES, strategies_of

SCHEDULE = "schedule"  # tokens per request, admissions and prefix hits, preemptions, tokens
BLOCKS = "blocks"  # blocks held after every step
ASPECTS = (SCHEDULE, BLOCKS)


@dataclass(frozen=True)
class Outcome:
    kvbench: tuple[StepLog, ...] | None  # None: kvbench refused the trace
    vllm: tuple[StepLog, ...]
    refusal: str | None = None


@cache
def outcome(trace_name: str, strategy: str) -> Outcome:
    trace = TRACES[trace_name]
    allocation = kvbench_side.allocation(trace, strategy)
    theirs = tuple(vllm_side.run(trace, "prefix" in strategy, allocation))
    try:
        ours = tuple(kvbench_side.run(trace, strategy))
    except KvbenchInputError as e:
        return Outcome(None, theirs, str(e))
    return Outcome(ours, theirs)


def _without_blocks(logs: tuple[StepLog, ...]) -> list[StepLog]:
    return [replace(s, blocks_held=0) for s in logs]


def _blocks_only(logs: tuple[StepLog, ...]) -> list[StepLog]:
    return [StepLog(s.step, (), (), (), s.blocks_held, (), ()) for s in logs]


def difference(trace_name: str, strategy: str, aspect: str) -> str | None:
    """None where kvbench and vLLM agree in every step in `aspect`; else where they first
    differ and how."""
    result = outcome(trace_name, strategy)
    if result.kvbench is None:
        return f"kvbench refuses it ({result.refusal.split(';')[0]}); vLLM serves it"
    pick = _without_blocks if aspect == SCHEDULE else _blocks_only
    return first_difference(pick(result.kvbench), pick(result.vllm))


def cases() -> list[tuple[str, str]]:
    return [(name, strategy) for name, trace in TRACES.items() for strategy in strategies_of(trace)]


def table() -> str:
    """The markdown table of docs/vllm_oracle.md."""
    rows = ["| trace | strategy | schedule | blocks held | kvbench: preemptions / hit tokens / "
            "peak blocks / last finish | vLLM: same |",
            "|---|---|---|---|---|---|"]
    for name, strategy in cases():
        result = outcome(name, strategy)
        cells = []
        for aspect in ASPECTS:
            diff = difference(name, strategy, aspect)
            if diff is None:
                cells.append("identical")
                continue
            lines = diff.splitlines()
            if aspect == BLOCKS and len(lines) > 1:  # the two counts are short: show them
                lines[0] = f"{lines[0].split(':')[0]}: {lines[1].split(': ', 1)[1]}"
            cells.append("differs, " + lines[0].replace("|", "/"))
        theirs = summary(list(result.vllm))
        ours = summary(list(result.kvbench)) if result.kvbench else None
        fmt = ("{preemptions} / {hit_tokens} / {peak_blocks} / {last_finish}").format
        rows.append(f"| {name} | {strategy} | {cells[0]} | {cells[1]} | "
                    f"{fmt(**ours) if ours else 'refused'} | {fmt(**theirs)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import vllm

    print(f"vLLM {vllm.__version__}\n")
    print(table())
    print()
    for name, strategy in cases():
        for aspect in ASPECTS:
            diff = difference(name, strategy, aspect)
            if diff:
                print(f"### {name} / {strategy} / {aspect}\n```\n{diff}\n```")
