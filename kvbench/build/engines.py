"""`build_engine`, and which factory builds each `EngineKind`: the one table of engine kinds.

The table is here, above the factories, rather than in the factories' own files: the
simulator's path must not import torch, and the model's and the transformers baseline's
factories do. A new engine kind is its factory's file, an `EngineKind` member and its row in
`EXECUTOR_FACTORIES`.
"""

from __future__ import annotations

from collections.abc import Callable

from kvbench.build.engine_build import BuildContext, BuiltEngine, ExecutorFactory, engine_shape
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.clock import RunClock
from kvbench.core.engine_kind import EngineKind


def _model(gpu: str | None = None) -> ExecutorFactory:
    from kvbench.build.model_executors import ModelExecutors  # torch: only a run that computes

    return ModelExecutors()


def _simulated(gpu: str | None = None) -> ExecutorFactory:
    return SimulatedExecutors(gpu) if gpu else SimulatedExecutors()


def _transformers(gpu: str | None = None) -> ExecutorFactory:
    from kvbench.build.transformers_engines import TransformersEngines  # torch, transformers

    return TransformersEngines()


# Each engine kind's factory, given the simulated GPU (which only the simulator reads).
EXECUTOR_FACTORIES: dict[EngineKind, Callable[[str | None], ExecutorFactory]] = {
    EngineKind.MODEL: _model,
    EngineKind.SIMULATED: _simulated,
    EngineKind.TRANSFORMERS: _transformers,
}


def executor_factory(engine_kind: EngineKind, gpu: str | None = None) -> ExecutorFactory:
    return EXECUTOR_FACTORIES[engine_kind](gpu)


def build_engine(
    config: EngineConfig,
    executor: ExecutorFactory | None = None,
    *,
    clock: RunClock | None = None,
    model_cache: dict | None = None,
) -> BuiltEngine:
    """The engine of `config` whose model side comes from `executor` (default: the model):
    planned and built at once."""
    factory = executor or _model()
    context = BuildContext(clock=clock, model_cache=model_cache)
    return factory.build(factory.plan(engine_shape(config), context), context)
