"""CUDA graphs for decode: capture sizes everywhere, and graph tokens equal eager tokens on a
GPU (skipped without one: there the graph path is never taken)."""

from __future__ import annotations

import pytest
import torch

from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.execution.decode_graphs import capture_sizes


def test_capture_sizes_cover_every_batch_up_to_the_maximum():
    for max_num_seqs in (1, 3, 8, 20, 256):
        sizes = capture_sizes(max_num_seqs)
        assert sizes == sorted(set(sizes)) and sizes[-1] == max_num_seqs
        assert sizes[0] == 1


def _tokens(strategy: str, graphs: bool) -> list[list[int]]:
    from kvbench.build.engines import build_engine

    built = build_engine(EngineConfig(
        model="tiny", device="cuda", strategy=strategy, attention_backend="triton",
        max_num_seqs=16, max_model_len=256, kv_memory="16MiB", enforce_eager=not graphs,
    ))
    engine = built.engine
    for i in range(11):  # odd batch sizes: padded rows must not change real rows
        prompt = tuple((i * 13 + j * 5) % 2000 for j in range(5 + 7 * i))
        engine.add_request(Request(i, 0.0, prompt, 24 + i))
    while engine.has_unfinished():
        engine.step()
    if graphs:
        captured = engine.executor.graphs
        assert captured.graphs, "no decode graph was captured"
        # Captured at build, before any step; an fp8 cache waits for its first write's scales.
        assert captured.late_captures == (len(captured.graphs) if strategy == "fp8" else 0)
    return [list(seq.token_ids) for r in sorted(engine.sequences)
            for seq in engine.sequences[r]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("strategy", ["paged", "contiguous", "prefix", "fp8"])
def test_decode_graph_tokens_equal_eager_tokens(strategy):
    assert _tokens(strategy, graphs=True) == _tokens(strategy, graphs=False)


def test_an_executor_with_graphs_frees_its_arena_as_soon_as_it_is_let_go(monkeypatch):
    # No reference cycle between the executor and its graphs: refcounting frees the arena at
    # once (on a GPU the next engine's arena needs that memory), the garbage collector off.
    import gc
    import weakref

    import kvbench.execution.model_executor as model_executor
    from kvbench.build.engines import build_engine

    monkeypatch.setattr(model_executor, "graphs_supported", lambda device, backend: True)
    built = build_engine(EngineConfig(model="tiny", max_num_seqs=4, kv_memory="1MiB"))
    executor = built.engine.executor
    assert executor.enable_cuda_graphs(4)
    arena = weakref.ref(executor.arena)
    gc.collect()
    gc.disable()
    try:
        del built, executor
        assert arena() is None
    finally:
        gc.enable()


def test_the_capture_plan_holds_every_key_a_run_can_meet_and_is_finite():
    from kvbench.execution.decode_graphs import capture_plan
    from kvbench.kernels.triton_ops import SPLIT_MAX, Target, choose_num_splits

    h200 = Target(arch=90, sms=132)
    max_num_seqs, max_model_len, kv_heads = 24, 4096, 8
    sizes = capture_sizes(max_num_seqs)
    plan = capture_plan(sizes, kv_heads, max_model_len, choose_num_splits, h200)
    assert plan == sorted(set(plan)) and {size for size, _ in plan} == set(sizes)
    # What `DecodeGraphs.run` asks for: the real batch's split count at its padded size.
    met = set()
    for n in range(1, max_num_seqs + 1):
        padded = next(s for s in sizes if s >= n)
        for length in range(1, max_model_len + 1):
            met.add((padded, choose_num_splits(n, kv_heads, length, h200)))
    assert met == set(plan)
    assert len(plan) <= len(sizes) * SPLIT_MAX


@pytest.mark.parametrize("strategy", ["paged", "fp8"])
def test_graphs_are_captured_at_build_before_the_first_step(monkeypatch, strategy):
    """An fp8 cache's graphs read the scales of its first write: they are all captured at
    the first decode step after it, at once, never one by one during the run."""
    import kvbench.execution.model_executor as model_executor
    from kvbench.build.engines import build_engine
    from kvbench.execution.decode_graphs import DecodeGraphs
    from kvbench.execution.model_executor import ModelExecutor
    from kvbench.models.resolve_config import resolve_model_config

    events = []

    class FakeGraph:
        def replay(self):
            events.append("replay")

    def fake_capture(self, size, splits):
        events.append(("capture", size, splits))
        return FakeGraph(), torch.zeros(size, resolve_model_config("tiny").hidden_size)

    execute = ModelExecutor.execute

    def recording_execute(self, batch):
        events.append("step")
        return execute(self, batch)

    monkeypatch.setattr(model_executor, "graphs_supported", lambda device, backend: True)
    monkeypatch.setattr(DecodeGraphs, "_capture", fake_capture)
    monkeypatch.setattr(ModelExecutor, "execute", recording_execute)
    built = build_engine(EngineConfig(model="tiny", max_num_seqs=12, max_model_len=256,
                                      kv_memory="1MiB", enforce_eager=False, strategy=strategy))
    engine = built.engine
    at_build = [e for e in events if e != "step"]
    for i in range(5):
        engine.add_request(Request(i, 0.0, tuple(range(3 + i)), 6))
    while engine.has_unfinished():
        engine.step()
    assert "replay" in events
    sizes = capture_sizes(12)  # short contexts: one split each
    graphs = engine.executor.graphs
    if strategy == "fp8":
        assert at_build == [] and graphs.late_captures == len(sizes)
        first_capture = next(i for i, e in enumerate(events) if e not in ("step", "replay"))
        captures = events[first_capture : first_capture + len(sizes)]
        assert [e[1] for e in captures] == sizes  # in one go, inside one step
        events = events[first_capture + len(sizes):]
    else:
        assert [size for _, size, _ in at_build] == sizes and graphs.late_captures == 0
        events = events[events.index("step"):]
    assert all(e == "step" or e == "replay" for e in events)
