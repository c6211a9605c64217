"""`RunConfig`: one run's configuration, in sections: the engine (`EngineConfig`), the
workload (`WorkloadConfig`: which requests), how it is replayed (`ReplayConfig`: arrivals and
what is recorded of them), and what executes the steps (`ExecutorConfig`: the `EngineKind`
and, simulated, the GPU).

`config.json` keeps one flat layout: the engine's options under `engine`, every other
section's fields beside it under their option names (a field's metadata "json", where its
name in the section differs), so `kvbench compare`, `kvbench report` and `--resume` read
folders written before the sections existed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError


@dataclass
class WorkloadConfig:
    name: str = field(default="chat", metadata={"json": "workload"})  # built-in or trace file
    num_requests: int | None = None  # None: the workload's default (whole file for a trace)
    params: dict[str, Any] = field(default_factory=dict, metadata={"json": "workload_params"})
    time_scale: float = 1.0  # multiplies the workload's own arrival times (trace timestamps)
    tokenizer: str | None = None  # Hugging Face tokenizer folder (ShareGPT JSON datasets)

    def __post_init__(self) -> None:
        if self.num_requests is not None and self.num_requests < 1:
            raise KvbenchInputError(
                f"--num-requests must be an integer >= 1, got {self.num_requests}"
            )


# vLLM's API server's time per request outside the engine's steps (HTTP, tokenization, the
# hand-off to the engine core over ZMQ and back, detokenization, streaming), a CPU cost one
# constant on every GPU: fitted on the low-concurrency published serving runs
# (docs/simulator.md, "Checked against published serving runs").
SERVER_FRONTEND_LATENCY_MS = 17.0


@dataclass
class ReplayConfig:
    request_rate: float = math.inf  # requests/s, every workload; inf: all arrive at t=0
    # conversations started/s (a conversation workload's other way to give the rate); inf:
    # not given
    conversation_rate: float = math.inf
    burstiness: float = 1.0  # gamma arrivals shape (1 = Poisson)
    max_concurrency: int | None = None  # closed loop: at most this many in flight
    warmup: int = 2  # requests run first and excluded from every metric
    slo_ms: dict[str, float] = field(default_factory=dict)  # e.g. {"ttft": 500, "tpot": 50}
    trace: bool = False  # write trace.json
    steps_every: int = 1  # steps.csv keeps every Nth step (summary: all of them)
    # Run decode runs in one move where the engine can (the simulator): the same results.
    fast_forward: bool = True
    # Milliseconds from a request's send to the engine's scheduler (a server's front end:
    # HTTP, tokenization, the hand-off to the engine and back); 0: none. `kvbench simulate`
    # takes `SERVER_FRONTEND_LATENCY_MS`, `kvbench run` has no server and adds none.
    frontend_latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise KvbenchInputError(f"--warmup must be 0 or more, got {self.warmup}")
        if not 0 <= self.frontend_latency_ms < math.inf:
            raise KvbenchInputError(
                f"--frontend-latency-ms must be 0 or more, got {self.frontend_latency_ms}")
        if self.steps_every < 1:
            raise KvbenchInputError(f"--steps-every must be at least 1, got {self.steps_every}")


@dataclass
class ExecutorConfig:
    kind: EngineKind = field(default=EngineKind.MODEL, metadata={"json": "engine_kind"})
    gpu: str | None = None  # the simulated GPU's preset
    gpu_spec: str | None = None  # a GPU described in a TOML file: replaces `gpu`
    # Whose defaults the options the user did not give took: vLLM v1's (the commands') or
    # kvbench's classic ones, which the sections state (`kvbench.session.vllm_defaults`); the
    # values they took are in their own sections. A configuration built in Python, or read
    # from a config.json written before the option, took the sections' own: classic.
    defaults: str = "classic"

    def __post_init__(self) -> None:
        self.kind = EngineKind.parse(self.kind)
        if self.defaults == "kvbench":  # the former name of classic (session.vllm_defaults)
            self.defaults = "classic"

    @property
    def simulated_gpu(self) -> str | None:
        """The preset name or TOML file of the GPU a simulated run models."""
        return self.gpu_spec or self.gpu


@dataclass
class RunConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)

    def to_dict(self) -> dict[str, Any]:
        """The `run` of `config.json` (also a sweep task's, and the key of a sweep point)."""
        data: dict[str, Any] = {"engine": self.engine.to_dict()}
        for name in FLAT_SECTIONS:
            section = getattr(self, name)
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                data[json_key(f)] = dict(value) if isinstance(value, dict) else value
        for name in RATES:
            rate = getattr(self.replay, name)
            data[name] = "inf" if math.isinf(rate) else rate
        data["engine_kind"] = self.executor.kind.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """`to_dict` read back (keys it lacks take the sections' defaults)."""
        flat = dict(data)
        built: dict[str, Any] = {"engine": EngineConfig.from_dict(dict(flat.pop("engine", {})))}
        for name in RATES:
            if name in flat:
                rate = flat[name]
                flat[name] = math.inf if rate in ("inf", None) else float(rate)
        for name, section_class in section_classes().items():
            if name in FLAT_SECTIONS:
                built[name] = section_class(**{
                    f.name: flat.pop(json_key(f)) for f in dataclasses.fields(section_class)
                    if json_key(f) in flat
                })
        if flat:
            raise KvbenchInputError(f"unknown run options: {', '.join(sorted(flat))}")
        return cls(**built)


# Rates of `ReplayConfig`: "inf" in `config.json` (JSON has no infinity).
RATES = ("request_rate", "conversation_rate")

# The sections whose fields `config.json` writes beside `engine`, not under a key of their own.
FLAT_SECTIONS = ("workload", "replay", "executor")


def section_classes() -> dict[str, type]:
    """`RunConfig`'s sections by name: `{"engine": EngineConfig, "workload": ...}`."""
    return {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}


def json_key(f: dataclasses.Field) -> str:
    """A section field's name in `config.json`."""
    return f.metadata.get("json", f.name)
