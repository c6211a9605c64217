"""One build path: the engines differ only by the executor factory passed to `build_engine`."""

from __future__ import annotations

import pytest
import torch

from kvbench.build.engines import build_engine, executor_factory
from kvbench.build.model_executors import ModelExecutors
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.build.transformers_engines import TransformersEngines
from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.core.sampling_params import SamplingParams
from kvbench.errors import KvbenchInputError
from kvbench.execution.model_executor import ModelExecutor
from kvbench.execution.sampling import sample_rows, sample_tokens
from kvbench.simulator.simulated_executor import SimulatedExecutor


def test_model_and_simulated_engines_share_the_wiring():
    config = dict(model="tiny", strategy="prefix", batching="static", kv_memory="2MiB",
                  max_num_seqs=3, block_size=8, device="cpu")
    model = build_engine(EngineConfig(**config))
    simulated = build_engine(EngineConfig(**config), executor=SimulatedExecutors("l4"))
    assert isinstance(model.engine.executor, ModelExecutor)
    assert isinstance(simulated.engine.executor, SimulatedExecutor)
    for built in (model, simulated):
        assert built.engine.policy.name == "static"
        assert built.engine.strategy.block_size == 8
        assert built.engine.policy.limits.max_num_seqs == 3
    # same budget, same fp32 slots: the same arena
    assert model.engine.strategy.num_slots == simulated.engine.strategy.num_slots


def test_engine_kinds_name_their_factories():
    assert isinstance(executor_factory(EngineKind.MODEL), ModelExecutors)
    assert isinstance(executor_factory(EngineKind.TRANSFORMERS), TransformersEngines)
    sim = executor_factory(EngineKind.SIMULATED, "h100-80gb")
    assert isinstance(sim, SimulatedExecutors) and sim.gpu == "h100-80gb"
    with pytest.raises(KvbenchInputError, match="unknown engine 'vllm'"):
        EngineKind.parse("vllm")


def test_forked_siblings_sample_from_their_parents_row_by_their_own_key():
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(0))
    keys = [((7, 0, 9), (7, 1, 9), (7, 2, 9)), ((8, 0, 12),)]
    tokens = sample_rows(logits, SamplingParams(1.0, 5, keys))
    assert tokens[1] == sample_tokens(logits, 1.0, 5, [(7, 0, 9), (8, 0, 12)])[1:]
    for j, key in enumerate(keys[0]):
        assert tokens[0][j] == sample_tokens(logits[0:1], 1.0, 5, [key])[0]
    greedy = sample_rows(logits, SamplingParams(0.0, 5, keys))
    assert greedy == [[int(logits[0].argmax())] * 3, [int(logits[1].argmax())]]
