"""A GPU holds one KV arena at a time (each takes ~90% of memory): every finished engine's
arena must be freed before the next one is allocated, CUDA graphs on, fp8 accuracy included.

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
    executors_with_graphs: list[weakref.ref] = []
    init = model_executor.KVArena.__init__

    def tracked_init(self, *args, **kwargs):
        alive_at_allocation.append(sum(ref() is not None for ref in arenas))
        init(self, *args, **kwargs)
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
    monkeypatch.setattr(session, "holds_one_arena_at_a_time", lambda device: True)
    options = RunOptions.for_kind(
        "run", strategy="paged,contiguous,fp8", model="tiny", num_requests=3,
        warmup=0, enforce_eager=False, out=str(tmp_path))
    gc.collect()
    gc.disable()
    try:
        session.run_session(session.plan_session(options))
    finally:
        gc.enable()
    # planned (3), run (3), the fp8 accuracy's own two
    assert len(arenas) == 8 and len(executors_with_graphs) == 8
    assert alive_at_allocation == [0] * len(arenas)
