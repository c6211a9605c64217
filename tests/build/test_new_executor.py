"""A new executor is one `ExecutorFactory` file: the engine, scheduler and strategies it runs
under come from the one wiring, unchanged (docs/design.md, Extending kvbench)."""

from __future__ import annotations

import pytest

from kvbench.build.engine_build import BuildContext, EngineShape, ExecutorFactory
from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.executor import DeviceKind, Executor
from kvbench.core.request import Request
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.simulator.simulated_executor import SimulatedClock

STEP_S = 0.001


class FixedStepExecutor(Executor):
    """Every step takes one millisecond on the clock and samples token 0."""

    reads_token_inputs = False

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock
        self.device = DeviceKind("cpu")

    def execute_and_sample(self, batch: StepBatch, sampling: SamplingParams) -> list[list[int]]:
        self.clock.advance(STEP_S)
        return [[0] * len(keys) for keys in sampling.keys]


class FixedStepExecutors(ExecutorFactory):
    """The extension under test: the whole of a new executor kind's wiring."""

    def load(self, shape: EngineShape, context: BuildContext):
        return DeviceKind("cpu"), None

    def kv_dtype(self, config: EngineConfig) -> str:
        return "float32"

    def kv_budget(self, config, device, model, model_config, max_batched_tokens):
        return int(config.kv_memory), None

    def clock(self, context: BuildContext) -> SimulatedClock:
        return SimulatedClock()

    def executor(self, plan, clock):
        return FixedStepExecutor(clock)

    def backend(self, config: EngineConfig, device: DeviceKind) -> str:
        return "fixed-step"


def _replay(factory: ExecutorFactory):
    config = EngineConfig(model="tiny", strategy="paged", kv_memory="2MiB", max_model_len=512)
    built = build_engine(config, executor=factory)
    engine = built.engine
    for i in range(6):
        engine.add_request(Request(i, 0.0, tuple(range(1, 20 + 10 * i)), 8 + i))
    engine.run_to_completion()
    return built, engine


def test_a_new_executor_factory_runs_under_the_shared_wiring():
    built, engine = _replay(FixedStepExecutors())
    assert built.backend == "fixed-step"
    finished = [seq for group in engine.sequences.values() for seq in group]
    assert len(finished) == 6 and all(seq.finish_s is not None for seq in finished)
    assert engine.clock() == pytest.approx(engine.step_recorder.num_steps * STEP_S)  # its clock
    # The same scheduler and strategy book the same steps as under the simulator's executor.
    _, simulated = _replay(SimulatedExecutors("a100-80gb"))
    assert ([(s.num_prefill_seqs, s.num_decode_seqs, s.kv_token_bytes) for s in engine.steps]
            == [(s.num_prefill_seqs, s.num_decode_seqs, s.kv_token_bytes)
                for s in simulated.steps])
