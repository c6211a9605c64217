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
        max_num_seqs=16, max_model_len=256, kv_memory="16MiB",
    ))
    engine = built.engine
    if graphs:
        assert engine.executor.enable_cuda_graphs(16)
    for i in range(11):  # odd batch sizes: padded rows must not change real rows
        prompt = tuple((i * 13 + j * 5) % 2000 for j in range(5 + 7 * i))
        engine.add_request(Request(i, 0.0, prompt, 24 + i))
    while engine.has_unfinished():
        engine.step()
    if graphs:
        assert engine.executor.graphs.graphs, "no decode step replayed a graph"
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
