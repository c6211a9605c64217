"""NVTX ranges around engine phases, mirrored into an optional Chrome-trace recorder.

`with trace_range("decode", decode_seqs=12, tokens=12): ...` is
- an NVTX push/pop range in the `kvbench` domain named by the phase alone (`nsys stats
  --report nvtx_sum` lists one row per phase): its payload is its `tokens` argument (the
  tokens the phase works on, one meaning on every range) and its category groups phases
  (`runner`, `engine`, `model`, `kernel`). Pushed only while a tool that consumes NVTX
  (Nsight Systems or Compute) is attached; `KVBENCH_NVTX=0` switches it off even then;
- a complete ("X") event in the `TraceRecorder` set with `set_recorder` (`kvbench run
  --trace`), written as `trace.json` in Chrome trace format, with all the arguments.

`trace_counter("kv_bytes", t, {"token": n, ...})` samples one NVTX 64-bit counter per series
(`kv_bytes.token`) and a Chrome-trace counter track. When neither is active `trace_range`
returns one shared no-op context manager, cheap enough to sit around every kernel call.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

# NVTX colours (ARGB) by range name, so phases are told apart at a glance in Nsight Systems.
_COLORS = {
    "replay": 0xFF9E9E9E, "idle": 0xFFE0E0E0, "step": 0xFF1F77B4, "schedule": 0xFFFF7F0E,
    "layout": 0xFFBCBD22, "prepare": 0xFF8C564B, "prefill": 0xFFD62728, "decode": 0xFF2CA02C,
    "sample": 0xFF9467BD, "write_kv": 0xFF17BECF, "prefill_attention": 0xFFFF9896,
    "decode_attention": 0xFF98DF8A, "kv_store": 0xFFF7B6D2, "kv_load": 0xFFC49C94,
}
_DEFAULT_COLOR = 0xFF7F7F7F

# NVTX categories: a handful of groups, so that Nsight can filter runner, engine, model and
# kernel ranges apart without the names carrying it.
_CATEGORIES = {name: category for category, names in {
    "runner": "replay idle warmup metrics",
    "engine": "step schedule layout sample",
    "model": "prepare prefill decode generate",
    # copies between the KV arena and a host tier (kvbench/execution/host_kv_tier.py)
    "transfer": "kv_store kv_load",
    # with the simulator's modelled forward parts (kvbench/simulator/step_trace.py)
    "kernel": "write_kv prefill_attention decode_attention gemm elementwise all_reduce "
              "layer_floor lm_head",
}.items() for name in names.split()}
_DEFAULT_CATEGORY = "other"


def _payload(args: dict[str, Any]) -> int | None:
    """The one number NVTX carries with a range: its `tokens` argument, if any."""
    value = args.get("tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# The lowest `nvtx` with everything used here: keyword `push_range` (0.2.15) and counters
# (`Domain.get_counter`, 0.2.16). pyproject.toml requires it; an older one found anyway turns
# NVTX off with a warning rather than failing a profiled run at its first step.
NVTX_MIN_VERSION = (0, 2, 16)


def _load_nvtx_domain() -> Any:
    """The `kvbench` NVTX domain when a profiler is attached, else None."""
    if os.environ.get("KVBENCH_NVTX", "").strip() == "0":
        return None
    try:
        # nvtx: optional, only under a profiler
        import nvtx

        domain = nvtx.get_domain("kvbench")
    except Exception:  # noqa: BLE001 - no package, no library, old API: no NVTX
        return None
    # Without a tool attached `get_domain` hands back a DummyDomain whose calls do nothing.
    if type(domain).__name__ == "DummyDomain":
        return None
    if not callable(getattr(domain, "get_counter", None)):
        wanted = ".".join(map(str, NVTX_MIN_VERSION))
        print(f"kvbench: NVTX ranges off: the installed nvtx package is older than {wanted} "
              f"(pip install 'nvtx>={wanted}')", file=sys.stderr)
        return None
    return domain


# Loaded on first use: the `nvtx` package imports numpy, and the engine core must stay light.
_UNLOADED: Any = object()
_nvtx_domain: Any = _UNLOADED


def _domain() -> Any:
    global _nvtx_domain
    if _nvtx_domain is _UNLOADED:
        _nvtx_domain = _load_nvtx_domain()
    return _nvtx_domain

# Chrome-trace thread ids of the per-request tracks: above any Linux thread id (pid_max is at
# most 2**22) and within the 32 bits trace viewers expect.
_REQUEST_TID_BASE = 1_000_000_000
_pids = itertools.count()


def _unique_pid(process_name: str) -> int:
    """A pid for one recorder, distinct from every other run's: traces merged in Perfetto or
    DevTools (a real and a simulated `paged` run) stay apart. Built from the OS process, the
    moment and a counter, not from the name alone, within the 30 bits viewers take."""
    key = f"{process_name}\0{os.getpid()}\0{time.time_ns()}\0{next(_pids)}"
    return zlib.crc32(key.encode()) & 0x3FFF_FFFF


class TraceRecorder:
    """Chrome trace events, timestamps in whole microseconds since `origin_s` (so a child's
    end never passes its parent's in a viewer's floating-point sums).

    Ranges are complete ("X") events: DevTools pairs begin/end events with one stack for the
    whole file, so interleaving threads would lose slices. Counters are "C" events. `events`
    lists them ready to write: names first, then by start, outer ranges first, a range still
    open (an interrupted run) closed at the last timestamp.

    `drawn_by_executor`: range names the engine's executor draws itself on its clock (a
    simulated one, whose clock moves only by modelled time, draws its modelled host phases):
    the engine's own ranges of those names stay out of the trace (they still go to NVTX).
    """

    def __init__(
        self, process_name: str = "kvbench", clock: Callable[[], float] | None = None,
        drawn_by_executor: frozenset[str] = frozenset(),
    ) -> None:
        # (start, -duration, depth, event): the sort key of `events` beside each event
        self._events: list[tuple[int, int, int, dict[str, Any]]] = []
        # The runner passes the engine's run clock (a simulated run's trace is on the simulated
        # clock, as its summary); the wall clock serves library users tracing their own code.
        self.clock: Callable[[], float] = clock or time.perf_counter
        self.origin_s = self.clock()
        self.pid = _unique_pid(process_name)
        self.process_name = process_name
        self.drawn_by_executor = drawn_by_executor
        self._threads: dict[int, str] = {}
        self._sort: dict[int, int] = {}
        # per thread: (name, args, start, how many slices had been recorded at its start)
        self._open: dict[int, list[tuple[str, dict[str, Any] | None, int, int]]] = {}

    def _us(self, t_s: float) -> int:
        return round((t_s - self.origin_s) * 1e6)

    def _tid(self) -> int:
        tid = threading.get_native_id()
        if tid not in self._threads:
            thread = threading.current_thread()
            main = thread is threading.main_thread()
            self._threads[tid] = "steps" if main else thread.name
            self._sort[tid] = 0 if main else 1
        return tid

    def _slice(self, name: str, start_us: int, end_us: int, tid: int, depth: int,
               args: dict[str, Any] | None, category: str | None = None) -> None:
        end_us = max(end_us, start_us)
        category = category or _CATEGORIES.get(name, _DEFAULT_CATEGORY)
        event = {"name": name, "cat": category, "ph": "X",
                 "ts": start_us, "dur": end_us - start_us, "pid": self.pid, "tid": tid}
        if args:
            event["args"] = args
        self._events.append((start_us, start_us - end_us, depth, event))

    def begin(self, name: str, args: dict[str, Any] | None = None, t_s: float | None = None):
        self._open.setdefault(self._tid(), []).append(
            (name, args, self._us(self.clock() if t_s is None else t_s), len(self._events)))

    def end(self, name: str, t_s: float | None = None, discard: bool = False) -> None:
        """Close the innermost open range of this thread (`name`: the one it must be).
        `discard`: drop it and what this thread recorded inside it, as if it had not begun
        (a step that turned out empty, nothing scheduled, has no row in steps.csv either)."""
        tid = self._tid()
        stack = self._open[tid]
        begun, args, start_us, recorded = stack.pop()
        if begun != name:
            raise RuntimeError(f"trace range {name!r} ended while {begun!r} is open")
        if discard:
            self._events[recorded:] = [e for e in self._events[recorded:] if e[3]["tid"] != tid]
        else:
            self._slice(name, start_us, self._us(self.clock() if t_s is None else t_s), tid,
                        len(stack), args)

    def complete(self, name: str, start_s: float, end_s: float, args: dict[str, Any],
                 nested: int = 0) -> None:
        """A finished range given by its times, on this thread, inside the ranges open now
        (`nested` levels further in: a drawn range's children)."""
        tid = self._tid()
        self._slice(name, self._us(start_s), self._us(end_s), tid,
                    len(self._open.get(tid, ())) + nested, args)

    def counter(self, name: str, t_s: float | None, values: dict[str, float]) -> None:
        """A counter track sample (one track per series), stamped at the recorder's clock's
        now: `t_s`, the caller's run-clock time, is that moment on the engine's clock."""
        del t_s
        ts = self._us(self.clock())
        self._events.append((ts, 0, 0, {"name": name, "ph": "C", "ts": ts, "pid": self.pid,
                                        "tid": self._tid(), "args": dict(values)}))

    def request_tracks(self, sequences: Mapping[int, Sequence[Any]]) -> None:
        """One track per request beside the step track: its `queue` (arrival to admission),
        `prefill` (admission to first token) and `decode` (first token to last) phases, from
        the engine's request id -> samples map (run-clock times, zero at `origin_s`)."""
        for request_id, group in sorted(sequences.items()):
            if not group or request_id < 0:
                continue
            first = group[0]
            request = first.request
            tid = _REQUEST_TID_BASE + request_id
            self._threads[tid] = f"request {request_id}"
            self._sort[tid] = 2 + request_id
            finishes = [s.finish_s for s in group if s.finish_s is not None]
            marks = [request.arrival_s, first.admitted_s, first.first_token_s,
                     max(finishes) if len(finishes) == len(group) else None]
            args = {"request_id": request_id, "prompt_len": request.prompt_len,
                    "output_len": request.output_len, "n": request.n,
                    "cached_prompt_tokens": first.cached_prompt_tokens,
                    "preemptions": sum(s.preemptions for s in group)}
            for name, start, end in zip(("queue", "prefill", "decode"), marks[:-1], marks[1:],
                                        strict=True):
                if start is None or end is None:
                    break
                self._slice(name, self._us(self.origin_s + start), self._us(self.origin_s + end),
                            tid, 0, args, category="request")

    @property
    def events(self) -> list[dict[str, Any]]:
        ordered = sorted(self._events, key=itemgetter(0, 1, 2))
        last = max((ts - neg_dur for ts, neg_dur, _, _ in ordered), default=0)
        events = [event for *_, event in ordered]
        for tid, stack in self._open.items():
            for name, args, start_us, _ in stack:
                closed = {**(args or {}), "closed": "at end of trace"}
                events.append({"name": name, "cat": _CATEGORIES.get(name, _DEFAULT_CATEGORY),
                               "ph": "X", "ts": start_us, "dur": max(0, last - start_us),
                               "pid": self.pid, "tid": tid, "args": closed})
        meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0,
                 "args": {"name": self.process_name}}]
        meta += [{"name": "thread_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": tid,
                  "args": {"name": name}} for tid, name in self._threads.items()]
        meta += [{"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": self.pid, "tid": tid,
                  "args": {"sort_index": index}} for tid, index in self._sort.items()]
        return meta + events

    def to_json(self) -> dict[str, Any]:
        # No `displayTimeUnit`: older trace processors read the timestamps in that unit.
        return {"traceEvents": self.events}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json()), encoding="utf-8")
        return path


_recorder: TraceRecorder | None = None


def set_recorder(recorder: TraceRecorder | None) -> None:
    global _recorder
    _recorder = recorder


def get_recorder() -> TraceRecorder | None:
    return _recorder


def nvtx_active() -> bool:
    """True when NVTX ranges reach a profiler (Nsight Systems or Compute is attached)."""
    return _domain() is not None


def tracing_active() -> bool:
    """True when `trace_range` does anything (a recorder is set or a profiler is attached)."""
    return _recorder is not None or _domain() is not None


# What `trace_range` returns when nothing records: a caller on a hot path that checked
# `tracing_active()` once uses it directly, without building the range's arguments.
NO_RANGE = contextlib.nullcontext()


class _Range:
    __slots__ = ("name", "args", "recorder", "discarded")

    def __init__(self, name: str, args: dict[str, Any], recorder: TraceRecorder | None):
        self.name = name
        self.args = args
        self.recorder = recorder
        self.discarded = False

    def __enter__(self) -> None:
        domain = _domain()
        if domain is not None:
            domain.push_range(
                message=self.name,
                color=_COLORS.get(self.name, _DEFAULT_COLOR),
                category=_CATEGORIES.get(self.name, _DEFAULT_CATEGORY),
                payload=_payload(self.args),
            )
        if self.recorder is not None:
            self.recorder.begin(self.name, self.args)

    def __exit__(self, *exc: object) -> bool:
        if self.recorder is not None:
            self.recorder.end(self.name, discard=self.discarded)
        domain = _domain()
        if domain is not None:
            domain.pop_range()
        return False


def trace_range(name: str, **args: Any) -> contextlib.AbstractContextManager[None]:
    """An NVTX range and, when recording, a Chrome-trace range.

    `name` must be a fixed phase name (never formatted with values): NVTX and Nsight group
    ranges by it. Per-call values go in `args` (NVTX payload, Chrome-trace arguments).
    """
    recorder = _recorder
    if recorder is not None and name in recorder.drawn_by_executor:
        recorder = None
    if recorder is None and _domain() is None:
        return NO_RANGE
    return _Range(name, args, recorder)


def discard_range(entered: contextlib.AbstractContextManager[None]) -> None:
    """Leave the Chrome-trace range `entered` (from `trace_range`, still open) out of the
    trace when it closes, with what was recorded inside it; NVTX still shows it."""
    if isinstance(entered, _Range):
        entered.discarded = True


def trace_counter(name: str, t_s: float | None, values: dict[str, int | float]) -> None:
    """Sample counter `name`: NVTX counters `name.series` and a Chrome-trace counter track."""
    domain = _domain()  # loads it: a counter may come before any range
    if domain is not None:
        for key, value in values.items():
            kind = float if isinstance(value, float) else int
            domain.get_counter(f"{name}.{key}", kind).sample(kind(value))
    recorder = _recorder
    if recorder is not None:
        recorder.counter(name, t_s, values)
