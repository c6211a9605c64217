"""Traces: `kvbench run --trace` and `kvbench simulate --trace` write Chrome traces that
DevTools and Perfetto load whole (tests/session/devtools_trace_rules.py: the Trace Event
Format's rules and DevTools' trace engine, transcribed) and whose ranges cover the run;
`trace_range` is a no-op without a recorder or profiler and feeds NVTX when one is attached."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from kvbench import tracing
from kvbench.cli import main
from tests.session.devtools_trace_rules import slices, trace_problems

TINY = ["--num-requests", "8", "--warmup", "0", "--kv-memory", "8MiB", "--quiet"]
DATA = Path(__file__).parent / "data"


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


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("simulated")
    assert main(["simulate", "--strategy", "paged", "--workload", "chat", "--trace",
                 "--num-requests", "8", "--quiet", "--out", str(out)]) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def _trace(folder: Path) -> dict:
    return json.loads((folder / "trace.json").read_text())


def test_the_rules_reject_the_begin_end_traces_devtools_rejected():
    # An excerpt of a trace as kvbench wrote it with begin/end pairs: a step's pairs and the
    # request tracks' pairs interleave in time, and DevTools' one stack mismatches them.
    problems = trace_problems(json.loads((DATA / "trace_before_complete_events.json").read_text()))
    assert any(p.startswith("displayTimeUnit") for p in problems)
    assert sum("Begin/End events mismatch" in p for p in problems) >= 5


def test_the_rules_catch_a_slice_that_overlaps_its_parent():
    event = {"ph": "X", "pid": 1, "tid": 1, "cat": "engine"}
    inside = [{**event, "name": "step", "ts": 0, "dur": 10},
              {**event, "name": "decode", "ts": 2, "dur": 8}]
    assert trace_problems({"traceEvents": inside}) == []
    overlapping = [inside[0], {**event, "name": "decode", "ts": 2, "dur": 9}]
    (problem,) = trace_problems({"traceEvents": overlapping})
    assert "ends after its parent step" in problem
    assert trace_problems({"traceEvents": [{**event, "name": "step", "ts": 0}]})  # no dur


@pytest.mark.parametrize("label", ["paged-vllm-v1", "contiguous-max-vllm-v1"])
def test_trace_json_loads_clean_and_covers_the_run(traced, label):
    folder = traced / label
    data = _trace(folder)
    assert trace_problems(data) == []
    spans = slices(data)
    names = {s["name"] for s in spans}
    assert {"replay", "step", "schedule", "layout", "prepare", "sample", "write_kv",
            "prefill", "decode", "prefill_attention", "decode_attention"} <= names
    # counter tracks for KV use and batch size
    counters = {e["name"] for e in data["traceEvents"] if e["ph"] == "C"}
    assert {"kv_bytes", "batch"} <= counters
    # the batch composition is in the range arguments
    decode = next(s for s in spans if s["name"] == "decode" and s["cat"] == "model")
    assert {"decode_seqs", "prefill_seqs", "tokens"} <= set(decode["args"])
    _check_request_tracks(data, folder)
    # ranges cover >= 95% of the run's wall time
    (replay,) = [s for s in spans if s["name"] == "replay"]
    wall = replay["end"] - replay["start"]
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert wall >= 0.99 * summary["duration_s"] * 1e6
    children = [(s["start"], s["end"]) for s in spans
                if s["depth"] == replay["depth"] + 1 and s["tid"] == replay["tid"]]
    assert _union(children) >= 0.95 * wall


def _check_request_tracks(data: dict, folder: Path) -> None:
    """One track per request: queue, then prefill, then decode, back to back."""
    threads = {e["tid"]: e["args"]["name"] for e in data["traceEvents"]
               if e["name"] == "thread_name"}
    request_tids = {tid for tid, name in threads.items() if name.startswith("request ")}
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert len(request_tids) == summary["num_requests"]
    tid = min(request_tids)
    phases = sorted((s for s in slices(data) if s["tid"] == tid),
                    key=lambda s: (s["start"], s["end"]))
    assert [s["name"] for s in phases] == ["queue", "prefill", "decode"]
    assert all(a["end"] == b["start"] for a, b in pairwise(phases))
    assert {"request_id", "prompt_len", "output_len"} <= set(phases[0]["args"])


def test_a_simulated_trace_loads_clean_with_each_steps_modelled_phases(simulated):
    data = _trace(simulated)
    assert trace_problems(data) == []
    _check_request_tracks(data, simulated)
    spans = [s for s in slices(data) if s["tid"] < 1_000_000_000]
    steps = [s for s in spans if s["name"] == "step"]
    assert len(steps) > 8
    total_ms = 0.0
    for step in steps:
        inside = [s for s in spans if s["depth"] == step["depth"] + 1
                  and step["start"] <= s["start"] and s["end"] <= step["end"]]
        names = [s["name"] for s in inside]
        # Async scheduling (the default) hides a step's host overhead behind the previous
        # step's GPU time: such a step draws its forward alone
        assert names in (["schedule", "layout", "prepare", "prefill", "sample"],
                         ["schedule", "layout", "prepare", "decode", "sample"],
                         ["prefill"], ["decode"]), names
        # back to back, filling the step: its modelled time, whole microseconds
        assert inside[0]["start"] == step["start"] and inside[-1]["end"] == step["end"]
        assert all(a["end"] == b["start"] for a, b in pairwise(inside))
        host = [s["end"] - s["start"] for s in inside if s["name"] not in ("prefill", "decode")]
        assert not host or min(host) > 0
        forward = next(s for s in inside if s["name"] in ("prefill", "decode"))
        kernels = [s for s in spans if s["depth"] == forward["depth"] + 1
                   and forward["start"] <= s["start"] and s["end"] <= forward["end"]]
        attention = {"prefill_attention"} if forward["name"] == "prefill" else \
            {"decode_attention"}
        assert attention | {"gemm", "write_kv"} <= {k["name"] for k in kernels}
        assert forward["args"]["tokens"] >= 1
        total_ms += (step["end"] - step["start"]) / 1e3
    # the steps are the model's: the same total as kvbench_summary.json's simulated busy time
    summary = json.loads((simulated / "kvbench_summary.json").read_text())
    (replay,) = [s for s in spans if s["name"] == "replay"]
    assert (replay["end"] - replay["start"]) / 1e6 == pytest.approx(summary["duration_s"],
                                                                   abs=2e-6)
    assert total_ms == pytest.approx(sum(s["end"] - s["start"] for s in steps) / 1e3)


def test_every_run_has_its_own_process_and_merged_traces_load_clean(traced, simulated):
    merged: list[dict] = []
    processes = {}
    for folder in (traced / "paged-vllm-v1", traced / "contiguous-max-vllm-v1", simulated):
        data = _trace(folder)
        (meta,) = [e for e in data["traceEvents"] if e["name"] == "process_name"]
        assert {e["pid"] for e in data["traceEvents"]} == {meta["pid"]}
        processes[meta["args"]["name"]] = meta["pid"]
        merged += data["traceEvents"]
    assert set(processes) == {"kvbench paged-vllm-v1", "kvbench contiguous-max-vllm-v1",
                              "kvbench paged-vllm-v1 (simulated)"}
    assert len(set(processes.values())) == 3  # a real and a simulated paged run stay apart
    assert trace_problems({"traceEvents": merged}) == []


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
    assert trace_problems(data) == []
    spans = sorted(slices(data), key=lambda s: s["depth"])
    assert sorted(s["name"] for s in spans) == ["inner", "interrupted", "outer"]
    assert next(s for s in spans if s["name"] == "outer")["args"] == {"n": 1}
    assert next(s for s in spans if s["name"] == "interrupted")["args"] == {
        "closed": "at end of trace"}
    meta = {e["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert meta == {"process_name", "thread_name", "thread_sort_index"}
    assert tracing.TraceRecorder("x").pid != tracing.TraceRecorder("x").pid


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
    # the payload is a token count on every range: write_kv's layer index is no payload
    assert domain.calls == [("push", "decode", "model", 7), ("push", "write_kv", "kernel", None),
                            ("pop", None, None, None), ("pop", None, None, None)]


def test_an_nvtx_without_counters_turns_nvtx_off_with_a_warning(monkeypatch, capsys):
    import nvtx

    class OldDomain:  # nvtx 0.2.15's Domain: ranges, no `get_counter`
        def push_range(self, attributes=None, **kwargs):
            raise AssertionError("no range may reach an nvtx that cannot take counters")

    monkeypatch.setattr(nvtx, "get_domain", lambda name: OldDomain())
    assert tracing._load_nvtx_domain() is None
    assert "nvtx>=0.2.16" in capsys.readouterr().err


def test_pyproject_requires_the_lowest_nvtx_the_code_supports():
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    (pin,) = re.findall(r'"nvtx>=([0-9.]+)"', text)
    assert tuple(int(p) for p in pin.split(".")) == tracing.NVTX_MIN_VERSION


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
