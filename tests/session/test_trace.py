"""Traces: `kvbench run --trace` writes a valid Chrome trace whose ranges cover the run;
`trace_range` is a no-op without a recorder or profiler and feeds NVTX when one is attached."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import defaultdict

import pytest

from kvbench import tracing
from kvbench.cli import main

TINY = ["--num-requests", "8", "--warmup", "0", "--kv-memory", "8MiB", "--quiet"]
REQUIRED = {"name", "ph", "ts", "pid", "tid"}


def check_chrome_trace(data: dict) -> list[dict]:
    """Assert the Chrome trace format rules kvbench relies on; returns the spans.

    Every event has name/ph/ts/pid/tid; B/E pairs balance and nest per thread; timestamps
    never go back on a thread's track or on a counter's track.
    """
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    spans = []
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    last_ts: dict[tuple, float] = {}
    for event in data["traceEvents"]:
        missing = REQUIRED - set(event)
        assert not missing, f"{event} lacks {missing}"
        assert event["ph"] in {"B", "E", "X", "C", "M", "i"}, event
        assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
        if event["ph"] == "M":
            continue
        track = (event["pid"], event["tid"]) if event["ph"] != "C" else \
            (event["pid"], "counter", event["name"])
        assert event["ts"] >= last_ts.get(track, 0.0), f"time goes back on {track}: {event}"
        last_ts[track] = event["ts"]
        if event["ph"] == "C":
            assert event["args"] and all(isinstance(v, int | float)
                                         for v in event["args"].values()), event
        elif event["ph"] == "B":
            stacks[track].append(event)
        elif event["ph"] == "E":
            assert stacks[track], f"E without B: {event}"
            begin = stacks[track].pop()
            assert begin["name"] == event["name"], (begin, event)
            spans.append({"name": begin["name"], "start": begin["ts"], "end": event["ts"],
                          "depth": len(stacks[track]), "args": begin.get("args", {})})
    assert all(not s for s in stacks.values()), "unclosed ranges"
    return spans


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    out = tmp_path_factory.mktemp("traced")
    assert main(["run", "--strategy", "paged,contiguous", "--workload", "chat", "--trace",
                 "--out", str(out), *TINY]) == 0
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    return root


@pytest.mark.parametrize("label", ["paged", "contiguous-max"])
def test_trace_json_is_valid_chrome_trace_and_covers_the_run(traced, label):
    folder = traced / label
    data = json.loads((folder / "trace.json").read_text())
    spans = check_chrome_trace(data)
    names = {s["name"] for s in spans}
    assert {"replay", "step", "schedule", "layout", "prepare", "sample", "write_kv",
            "prefill", "decode", "prefill_attention", "decode_attention"} <= names
    # counter tracks for KV use and batch size
    counters = {e["name"] for e in data["traceEvents"] if e["ph"] == "C"}
    assert {"kv_bytes", "batch"} <= counters
    # the batch composition is in the range arguments
    decode = next(s for s in spans if s["name"] == "decode")
    assert {"decode_seqs", "prefill_seqs", "tokens"} <= set(decode["args"])
    # one track per request: queue, then prefill, then decode, back to back
    threads = {e["tid"]: e["args"]["name"] for e in data["traceEvents"]
               if e["name"] == "thread_name"}
    request_tids = {tid for tid, name in threads.items() if name.startswith("request ")}
    assert len(request_tids) == summary_requests(folder)
    tid = min(request_tids)
    phases = [e for e in data["traceEvents"] if e.get("tid") == tid and e["ph"] in "BE"]
    assert [(e["name"], e["ph"]) for e in phases] == [
        ("queue", "B"), ("queue", "E"), ("prefill", "B"), ("prefill", "E"),
        ("decode", "B"), ("decode", "E")]
    assert [e["ts"] for e in phases] == sorted(e["ts"] for e in phases)
    assert {"request_id", "prompt_len", "output_len"} <= set(phases[0]["args"])
    # ranges cover >= 95% of the run's wall time
    (replay,) = [s for s in spans if s["name"] == "replay"]
    wall = replay["end"] - replay["start"]
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert wall >= 0.99 * summary["duration_s"] * 1e6
    children = [(s["start"], s["end"]) for s in spans if s["depth"] == replay["depth"] + 1]
    assert _union(children) >= 0.95 * wall


def summary_requests(folder):
    return json.loads((folder / "kvbench_summary.json").read_text())["num_requests"]


def test_each_strategy_trace_is_its_own_process(traced):
    processes = {}
    for label in ("paged", "contiguous-max"):
        data = json.loads((traced / label / "trace.json").read_text())
        (meta,) = [e for e in data["traceEvents"] if e["name"] == "process_name"]
        assert label in meta["args"]["name"]
        assert {e["pid"] for e in data["traceEvents"]} == {meta["pid"]}
        processes[label] = meta["pid"]
    assert len(set(processes.values())) == 2  # opened together, they do not merge


def test_no_trace_without_the_flag(tmp_path):
    assert main(["run", "--strategy", "paged", "--workload", "uniform", "--out",
                 str(tmp_path), *TINY]) == 0
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (folder / "trace.json").exists()
    assert tracing.get_recorder() is None


def test_trace_range_is_a_shared_no_op_when_nothing_listens(monkeypatch):
    monkeypatch.setattr(tracing, "_nvtx_domain", None)
    tracing.set_recorder(None)
    assert not tracing.tracing_active()
    first, second = tracing.trace_range("a", x=1), tracing.trace_range("b")
    assert first is second
    with first:
        pass


def test_recorder_closes_open_ranges_and_names_threads():
    recorder = tracing.TraceRecorder()
    tracing.set_recorder(recorder)
    try:
        with tracing.trace_range("outer", n=1):
            with tracing.trace_range("inner"):
                pass
            recorder.counter("kv_bytes", 0.001, {"token": 5})
        recorder.begin("interrupted")
    finally:
        tracing.set_recorder(None)
    data = recorder.to_json()
    spans = check_chrome_trace(data)
    assert [s["name"] for s in spans] == ["inner", "outer", "interrupted"]
    assert spans[1]["args"] == {"n": 1}
    meta = {e["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert meta == {"process_name", "thread_name", "thread_sort_index"}


class RecordingDomain:
    """Stands in for the NVTX domain a profiler's injection library would receive."""

    def __init__(self):
        self.calls = []
        self.samples = defaultdict(list)

    def push_range(self, attributes=None, *, message=None, color=None, category=None,
                   payload=None):
        self.calls.append(("push", message, category, payload))

    def pop_range(self):
        self.calls.append(("pop", None, None, None))

    def get_counter(self, name, dtype, **kwargs):
        samples = self.samples[name]

        class Counter:
            def sample(self, value):
                assert isinstance(value, dtype)
                samples.append(value)

        return Counter()


def test_nvtx_names_are_static_and_arguments_ride_as_payload(monkeypatch):
    domain = RecordingDomain()
    monkeypatch.setattr(tracing, "_nvtx_domain", domain)
    tracing.set_recorder(None)
    assert tracing.nvtx_active()
    with tracing.trace_range("decode", decode_seqs=3, tokens=7):
        with tracing.trace_range("write_kv", layer=2):
            pass
    assert domain.calls == [("push", "decode", "model", 7), ("push", "write_kv", "kernel", 2),
                            ("pop", None, None, None), ("pop", None, None, None)]


@pytest.fixture
def injected(monkeypatch):
    """NVTX as Nsight attaches it: `nvtx.get_domain` hands back a live (recording) domain."""
    import nvtx

    domain = RecordingDomain()
    monkeypatch.setattr(nvtx, "get_domain", lambda name: domain)
    monkeypatch.setattr(tracing, "_nvtx_domain", tracing._load_nvtx_domain())
    assert tracing._nvtx_domain is domain
    return domain


def test_a_16_request_run_pushes_few_names_balanced_with_counters(injected, tmp_path):
    assert main(["run", "--strategy", "paged", "--workload", "chat", "--num-requests", "16",
                 "--warmup", "2", "--kv-memory", "8MiB", "--quiet", "--out",
                 str(tmp_path)]) == 0
    depth = 0
    names = set()
    for kind, name, category, payload in injected.calls:
        depth += 1 if kind == "push" else -1
        assert depth >= 0, "pop without push"
        if kind == "push":
            names.add(name)
            assert category in {"runner", "engine", "model", "kernel"}, (name, category)
            assert payload is None or isinstance(payload, int | float), (name, payload)
    assert depth == 0
    assert len(names) <= 30, sorted(names)
    assert {"warmup", "replay", "step", "schedule", "prefill", "decode", "write_kv",
            "prefill_attention", "decode_attention"} <= names
    assert all(re.fullmatch(r"[a-z_]+", n) for n in names), sorted(names)
    # KV bytes and batch size as NVTX counters, sampled once per step
    assert {"kv_bytes.token", "kv_bytes.held", "batch.running", "batch.waiting"} <= \
        set(injected.samples)
    steps = sum(1 for kind, name, *_ in injected.calls if kind == "push" and name == "step")
    assert 0 < len(injected.samples["batch.running"]) <= steps
    assert max(injected.samples["kv_bytes.token"]) > 0


def test_no_nvtx_package_means_no_nvtx(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx -> ImportError
    assert tracing._load_nvtx_domain() is None
    monkeypatch.delitem(sys.modules, "nvtx")
    monkeypatch.setenv("KVBENCH_NVTX", "0")
    assert tracing._load_nvtx_domain() is None


@pytest.mark.skipif(bool(os.environ.get("NVTX_INJECTION64_PATH")), reason="under a profiler")
def test_nvtx_is_off_without_a_profiler():
    # No Nsight attached in the test run: NVTX hands back its dummy domain.
    assert tracing._load_nvtx_domain() is None
