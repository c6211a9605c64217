"""`build_engine`, and which factory builds each `EngineKind`.

The choice is here, above the factories, rather than in the factories' own files: the
simulator's path must not import torch, and the model's and the transformers baseline's
factories do. A new engine kind is its factory's file, an `EngineKind` member and its branch in
`executor_factory`.
"""

from __future__ import annotations

from kvbench.build.engine_build import BuildContext, BuiltEngine, ExecutorFactory, engine_shape
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.clock import RunClock
from kvbench.core.engine_kind import EngineKind


def executor_factory(engine_kind: EngineKind, gpu: str | None = None) -> ExecutorFactory:
    """The factory of `engine_kind`; `gpu`: the simulated GPU (which only the simulator reads)."""
    if engine_kind is EngineKind.SIMULATED:
        return SimulatedExecutors(gpu) if gpu else SimulatedExecutors()
    if engine_kind is EngineKind.TRANSFORMERS:
        from kvbench.build.transformers_engines import TransformersEngines  # torch, transformers

        return TransformersEngines()
    from kvbench.build.model_executors import ModelExecutors  # torch: only a run that computes

    return ModelExecutors()


def build_engine(
    config: EngineConfig,
    executor: ExecutorFactory | None = None,
    *,
    clock: RunClock | None = None,
    model_cache: dict | None = None,
) -> BuiltEngine:
    """The engine of `config` whose model side comes from `executor` (default: the model):
    planned and built at once."""
    factory = executor or executor_factory(EngineKind.MODEL)
    context = BuildContext(clock=clock, model_cache=model_cache)
    return factory.build(factory.plan(engine_shape(config), context), context)
