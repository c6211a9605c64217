"""`RunConfig`: built from `RunOptions` through each field's declared section, and written to
`config.json` in the one flat layout that `compare`, `report` and `--resume` read."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest

from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.session.run_config import RunConfig, section_classes
from kvbench.session.run_options import RunOptions, build_run_config, option_fields
from kvbench.session.session import expand_runs

# Section fields that no option sets: the engine's own defaults.
NOT_OPTIONS: set[tuple[str, str]] = set()


def _landing(name: str) -> tuple[str, str]:
    spec = option_fields()[name].spec
    return spec.section, spec.key or name


def test_every_per_run_option_lands_in_exactly_one_config_section():
    classes = section_classes()
    per_run = [name for name, f in option_fields().items() if f.spec.per_run]
    for name in per_run:
        section, key = _landing(name)
        assert section in classes, f"RunOptions.{name} names no RunConfig section"
        assert key in {f.name for f in dataclasses.fields(classes[section])}, (
            f"RunOptions.{name} -> {section}.{key}: no such field")
    landings = Counter(_landing(name) for name, f in option_fields().items()
                       if f.spec.section is not None)
    assert [where for where, count in landings.items() if count > 1] == []


def test_every_section_field_is_an_option():
    landed = {_landing(name) for name, f in option_fields().items() if f.spec.section}
    fields = {(section, f.name) for section, cls in section_classes().items()
              for f in dataclasses.fields(cls)}
    assert fields - landed == NOT_OPTIONS


def test_session_options_land_nowhere_but_the_slo():
    session = {name: f.spec.section for name, f in option_fields().items()
               if not f.spec.per_run}
    assert session == {"slo": "replay", "repeat": None, "out": None,
                       "per_strategy_reports": None}


def test_an_option_default_is_its_sections():
    assert RunOptions().block_size == EngineConfig().block_size
    assert RunOptions().warmup == RunConfig().replay.warmup
    assert RunOptions().engine_kind == EngineKind.MODEL
    assert RunOptions.for_kind("simulate").engine_kind == EngineKind.SIMULATED


def test_option_values_fill_their_sections():
    values = {name: getattr(RunOptions(), name) for name in option_fields()}
    run = build_run_config({**values, "request_rate": 4.0, "workload_params": {"a": 1},
                            "slo": {"ttft": 5.0}, "dtype": "float32", "block_size": 32})
    assert run.engine.block_size == 32 and run.engine.dtype == "float32"
    assert (run.workload.name, run.workload.params) == ("chat", {"a": 1})
    assert (run.replay.request_rate, run.replay.slo_ms) == (4.0, {"ttft": 5.0})
    assert run.executor.kind is EngineKind.MODEL


def test_config_json_layout_is_flat_and_reads_back():
    (run,) = expand_runs(RunOptions.for_kind("simulate", gpu="l4", workload="uniform",
                                             workload_params=("prompt_len=8",),
                                             request_rate="2", slo="ttft=1s"))
    data = run.to_dict()
    assert set(data) == {
        "engine", "workload", "num_requests", "workload_params", "time_scale", "tokenizer",
        "request_rate", "conversation_rate", "burstiness", "max_concurrency", "warmup",
        "slo_ms", "trace", "steps_every", "fast_forward", "frontend_latency_ms", "engine_kind",
        "gpu", "gpu_spec", "defaults"}
    assert (data["workload"], data["engine_kind"], data["gpu"]) == ("uniform", "simulated", "l4")
    assert data["slo_ms"] == {"ttft": 1000.0} and data["request_rate"] == 2.0
    assert RunConfig.from_dict(data) == run


def test_a_folder_written_before_gpu_spec_was_a_field_loads():
    old = {"engine": {"model": "tiny", "strategy": "paged"}, "workload": "chat",
           "request_rate": "inf", "engine_kind": "simulated", "gpu": "my-gpu.toml"}
    run = RunConfig.from_dict(old)
    assert math.isinf(run.replay.request_rate) and run.executor.kind is EngineKind.SIMULATED
    assert math.isinf(run.replay.conversation_rate)  # a folder from before the option
    assert run.executor.simulated_gpu == "my-gpu.toml"


def test_unknown_run_keys_and_engines_are_refused():
    with pytest.raises(KvbenchInputError, match="unknown run options: colour"):
        RunConfig.from_dict({"engine": {}, "colour": "red"})
    with pytest.raises(KvbenchInputError, match="unknown engine 'vllm'"):
        RunConfig.from_dict({"engine": {}, "engine_kind": "vllm"})
