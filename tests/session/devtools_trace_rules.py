"""The Trace Event Format rules a trace must keep for Chrome DevTools and Perfetto to load it
whole, as a list of the problems found in one trace (empty: it loads clean).

From the Trace Event Format (the JSON format's spec): every event has `name`, `ph`, `pid`,
`tid` and `ts` (microseconds) of the right types; an `X` event has a non-negative `dur`; a
counter's `args` are numbers; an instant's scope is `g`, `p` or `t`; metadata events are the
known names; `B`/`E` timestamps never go back on one thread (`X` events may come in any
order); `displayTimeUnit`, when present, is `ms` or `ns` (kvbench writes none: older trace
processors read the timestamps in its unit).

Transcribed from DevTools' trace engine (front_end/models/trace): `RendererHandler` turns
`B`/`E` pairs into slices with ONE stack for the whole trace, in file order, whatever their
pid and tid (`makeCompleteEvent`): an `E` whose name or category differs from the last open
`B` logs "Begin/End events mismatch" and pops that `B` anyway, whose slice keeps a zero
duration; an `E` with nothing open is dropped. Each thread's slices are then sorted by start, longest first (`eventTimeComparator`)
and built into a tree (`TreeHelpers.treify`): a slice that starts inside its parent and ends
after it is left out of the tree, and drawn nowhere.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = set("BEXiICbneSTpFsftPNODMVvRc()")
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name",
            "thread_sort_index"}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _field_problems(event: Any) -> list[str]:
    if not isinstance(event, dict):
        return [f"not an object: {event!r}"]
    problems = []
    for key, kind in (("name", str), ("ph", str), ("pid", int), ("tid", int)):
        if not isinstance(event.get(key), kind) or isinstance(event.get(key), bool):
            problems.append(f"{key} missing or not {kind.__name__}: {event}")
    if event.get("ph") not in PHASES:
        problems.append(f"unknown phase: {event}")
    if not _number(event.get("ts")) or event["ts"] < 0:
        problems.append(f"ts missing, not a number or negative: {event}")
    if "args" in event and not isinstance(event["args"], dict):
        problems.append(f"args not an object: {event}")
    if "cat" in event and not isinstance(event["cat"], str):
        problems.append(f"cat not a string: {event}")
    ph = event.get("ph")
    if ph == "X" and (not _number(event.get("dur")) or event["dur"] < 0):
        problems.append(f"X event without a non-negative dur: {event}")
    if ph == "C" and not (event.get("args") and all(_number(v) for v in event["args"].values())):
        problems.append(f"counter without numeric args: {event}")
    if ph in {"i", "I"} and event.get("s", "t") not in {"g", "p", "t"}:
        problems.append(f"instant with an unknown scope: {event}")
    if ph == "M":
        if event.get("name") not in METADATA:
            problems.append(f"unknown metadata event: {event}")
        elif event["name"].endswith("_name") and not isinstance(
                event.get("args", {}).get("name"), str):
            problems.append(f"name metadata without args.name: {event}")
        elif event["name"].endswith("_sort_index") and not isinstance(
                event.get("args", {}).get("sort_index"), int):
            problems.append(f"sort index metadata without an integer args.sort_index: {event}")
    return problems


def _slices_from_begin_end(events: list[dict]) -> tuple[list[dict], list[str]]:
    """DevTools' `makeCompleteEvent`: one stack for every B/E of the trace, in file order."""
    stack: list[dict] = []
    made, problems = [], []
    for event in events:
        if event["ph"] == "B":
            stack.append({**event, "ph": "X", "dur": 0})
            made.append(stack[-1])
        elif event["ph"] == "E":
            if not stack:
                problems.append(f"E with no open B (dropped): {event}")
                continue
            begin = stack.pop()
            if begin["name"] != event["name"] or begin.get("cat") != event.get("cat"):
                problems.append(f"Begin/End events mismatch at {begin['ts']} ({begin['name']}) "
                                f"vs. {event['ts']} ({event['name']}): slice zeroed")
                continue
            begin["dur"] = event["ts"] - begin["ts"]
    problems += [f"B never ended (slice zeroed): {b}" for b in stack]
    return made, problems


def _tree_problems(entries: list[dict]) -> list[str]:
    """DevTools' `treify` over one thread's sorted slices: those it leaves out."""
    entries = sorted(entries, key=lambda e: (e["ts"], -(e["ts"] + e.get("dur", 0))))
    stack: list[dict] = []
    problems = []
    i = 0
    while i < len(entries):
        event = entries[i]
        if not stack:
            stack.append(event)
            i += 1
            continue
        parent = stack[-1]
        begin, end = event["ts"], event["ts"] + event.get("dur", 0)
        parent_end = parent["ts"] + parent.get("dur", 0)
        if begin < parent["ts"]:
            problems.append(f"slice starts before its parent: {event}")
        elif begin >= parent_end:
            stack.pop()
            continue
        elif end > parent_end:
            problems.append(f"slice ends after its parent {parent['name']} (left out): {event}")
        else:
            stack.append(event)
        i += 1
    return problems


def trace_problems(data: Any) -> list[str]:
    """Every rule `data` (a parsed trace.json) breaks; empty when DevTools loads it whole."""
    if isinstance(data, dict):
        if "displayTimeUnit" in data:
            problems = [f"displayTimeUnit {data['displayTimeUnit']!r}: timestamps are µs"]
        else:
            problems = []
        events = data.get("traceEvents")
    else:
        problems, events = [], data
    if not isinstance(events, list):
        return problems + ["no traceEvents list"]
    malformed = [p for event in events for p in _field_problems(event)]
    if malformed:
        return problems + malformed
    last_ts: dict[tuple[int, int], float] = {}
    for event in events:
        if event["ph"] in {"B", "E"}:
            thread = (event["pid"], event["tid"])
            if event["ts"] < last_ts.get(thread, float("-inf")):
                problems.append(f"B/E time goes back on thread {thread}: {event}")
            last_ts[thread] = event["ts"]
    made, begin_end_problems = _slices_from_begin_end(events)
    problems += begin_end_problems
    by_thread: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for event in [e for e in events if e["ph"] in {"X", "i", "I"}] + made:
        by_thread[(event["pid"], event["tid"])].append(event)
    for entries in by_thread.values():
        problems += _tree_problems(entries)
    return problems


def slices(data: dict) -> list[dict]:
    """The trace's X events as spans with their depth on their thread (for coverage checks)."""
    spans = []
    by_thread: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for event in data["traceEvents"]:
        if event["ph"] == "X":
            by_thread[(event["pid"], event["tid"])].append(event)
    for entries in by_thread.values():
        stack: list[float] = []
        for e in sorted(entries, key=lambda e: (e["ts"], -e["dur"])):
            while stack and e["ts"] >= stack[-1]:
                stack.pop()
            spans.append({"name": e["name"], "start": e["ts"], "end": e["ts"] + e["dur"],
                          "depth": len(stack), "args": e.get("args", {}), "tid": e["tid"],
                          "cat": e.get("cat")})
            stack.append(e["ts"] + e["dur"])
    return spans
