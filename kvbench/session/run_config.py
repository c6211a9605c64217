"""`RunConfig`: one run's configuration, in sections: the engine, the workload, how it is
replayed, and what executes the steps.

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
from kvbench.errors import KvbenchInputError
from kvbench.session.executor_config import ExecutorConfig
from kvbench.session.replay_config import ReplayConfig
from kvbench.session.workload_config import WorkloadConfig


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
