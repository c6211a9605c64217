"""The registry the CLI lists, parameters and their parsing."""

from __future__ import annotations

import inspect

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.workloads import WORKLOADS, build_workload, load_workload, parse_workload_params


def test_all_builtins_registered():
    assert set(WORKLOADS) == {
        "chat",
        "sharegpt",
        "lmsys",
        "summarize",
        "prefix-repeat",
        "parallel",
        "uniform",
    }


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_summary_and_params_match_builder(name):
    info = WORKLOADS[name]
    assert info.name == name
    assert info.summary and "\n" not in info.summary and len(info.summary) <= 100
    signature = inspect.signature(info.build)
    declared = {k: p.default for k, p in signature.parameters.items() if p.default is not p.empty}
    assert declared == dict(info.params)
    module = inspect.getmodule(info.build)
    assert module.__doc__ and len(module.__doc__) > 300  # distributions documented


def test_params_override_defaults_and_are_recorded():
    result = load_workload("parallel", 5, 0, 100, n=8)
    assert {r.n for r in result.requests} == {8}
    assert result.params["n"] == 8 and result.params["prompt_len"] == (64, 256)


def test_unknown_workload_and_param():
    with pytest.raises(KvbenchInputError, match="unknown workload 'chatt'"):
        build_workload("chatt", 4, 0, 100)
    with pytest.raises(KvbenchInputError, match="no parameter turns .*turns_per_conversation"):
        build_workload("chat", 4, 0, 100, turns=3)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("parallel", {"n": 0}, "n must be"),
        ("chat", {"user_len": (9, 3)}, "low <= high"),
        ("uniform", {"prompt_len": 2.5}, "prompt_len"),
        ("sharegpt", {"input_sigma": -1.0}, "input_sigma"),
        ("chat", {"think_time_s": float("nan")}, "think_time_s"),
    ],
)
def test_bad_param_values(name, params, match):
    with pytest.raises(KvbenchInputError, match=match):
        build_workload(name, 4, 0, 100, **params)


def test_parse_params_from_strings():
    assert parse_workload_params(
        "chat", ["user_len=8,32", "think-time-s=0.5", "turns_per_conversation=6"]
    ) == {
        "user_len": (8, 32),
        "think_time_s": 0.5,
        "turns_per_conversation": 6,
    }
    assert parse_workload_params("parallel", ["prompt_len=100"]) == {"prompt_len": (100, 100)}
    with pytest.raises(KvbenchInputError, match="expected int"):
        parse_workload_params("uniform", ["prompt_len=abc"])
    with pytest.raises(KvbenchInputError, match="name=value"):
        parse_workload_params("uniform", ["prompt_len"])
    with pytest.raises(KvbenchInputError, match="no parameter"):
        parse_workload_params("uniform", ["nope=1"])
