"""A GPU holds one KV arena at a time (each takes ~90% of memory): every finished engine's
arena must be freed before the next one is allocated, CUDA graphs on, fp8 accuracy included
(its reference holds one sequence's unquantized KV beside its run's arena, and is freed with
it).

CUDA graphs run on the CPU here with a fake capture (no CUDA stream: a replay that does
nothing), so the executor holds its `DecodeGraphs` exactly as on a GPU. The garbage collector
is off: what a GPU run relies on is that nothing is left for it to find.
"""

from __future__ import annotations

import gc
import weakref

import torch

import kvbench.execution.model_executor as model_executor
import kvbench.session.session as session
from kvbench.build.engine_build import engine_shape
from kvbench.execution.decode_graphs import DecodeGraphs
from kvbench.models.resolve_config import resolve_model_config
from kvbench.session.run_options import RunOptions


class _FakeGraph:
    def replay(self) -> None:
        pass


def _fake_capture(self, size: int, splits: int):
    return _FakeGraph(), torch.zeros(size, resolve_model_config("tiny").hidden_size)


def test_each_arena_is_freed_before_the_next_is_allocated_with_graphs_on(tmp_path, monkeypatch):
    arenas: list[weakref.ref] = []
    alive_at_allocation: list[int] = []
    slots: list[int] = []
    executors_with_graphs: list[weakref.ref] = []
    init = model_executor.KVArena.__init__

    def tracked_init(self, groups, num_slots, *args, **kwargs):
        alive_at_allocation.append(sum(ref() is not None for ref in arenas))
        slots.append(num_slots)
        init(self, groups, num_slots, *args, **kwargs)
        arenas.append(weakref.ref(self))

    enable = model_executor.ModelExecutor.enable_cuda_graphs

    def tracked_enable(self, max_num_seqs):
        assert enable(self, max_num_seqs)
        executors_with_graphs.append(weakref.ref(self))
        return True

    monkeypatch.setattr(model_executor.KVArena, "__init__", tracked_init)
    monkeypatch.setattr(model_executor, "graphs_supported", lambda device, backend: True)
    monkeypatch.setattr(model_executor.ModelExecutor, "enable_cuda_graphs", tracked_enable)
    monkeypatch.setattr(DecodeGraphs, "_capture", _fake_capture)
    options = RunOptions.for_kind(
        "run", strategy="paged,contiguous,fp8", model="tiny", num_requests=3,
        warmup=0, enforce_eager=False, out=str(tmp_path))
    gc.collect()
    gc.disable()
    try:
        session.run_session(session.plan_session(options))
    finally:
        gc.enable()
    # Nothing is allocated to plan; each run's engine is built once, as its run starts; the
    # fp8 run's accuracy reference (one sequence, eager) beside its own arena, last.
    assert len(arenas) == 4 and len(executors_with_graphs) == 3
    assert alive_at_allocation == [0, 0, 0, 1]
    longest = engine_shape(session.expand_runs(options)[0].engine).max_model_len
    assert slots[-1] <= longest < min(slots[:3])
    assert all(ref() is None for ref in arenas)
