"""The table of workloads the CLI lists, their parameters and their parsing, and the extension
point: a workload registered from a module of its own is listed, parsed and run."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json

import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.workloads import WORKLOADS, is_trace, load_workload, parse_workload_params

BUILTINS = ["chat", "sharegpt", "lmsys", "summarize", "prefix-repeat", "parallel", "uniform"]


def test_all_builtins_registered_in_listing_order():
    assert WORKLOADS.names()[: len(BUILTINS)] == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_summary_and_params_match_generator(name):
    entry = WORKLOADS.get(name)
    assert entry.name == name
    assert entry.summary and "\n" not in entry.summary and len(entry.summary) <= 100
    signature = inspect.signature(entry.generator)
    assert list(signature.parameters) == ["num_requests", "seed", "vocab_size", *entry.params]
    module = importlib.import_module(f"kvbench.workloads.{name.replace('-', '_')}")
    assert module.DEFAULTS == dict(entry.params)
    assert module.__doc__ and len(module.__doc__) > 300  # distributions documented


def test_params_override_defaults_and_are_recorded():
    result = load_workload("parallel", 5, 0, 100, n=8)
    assert {r.n for r in result.requests} == {8}
    assert result.params["n"] == 8 and result.params["prompt_len"] == (64, 256)


def test_unknown_workload_is_one_line_naming_the_choices():
    message = (
        "unknown workload 'chatt' (workloads: chat, sharegpt, lmsys, summarize, prefix-repeat, "
        "parallel, uniform; or a trace file)"
    )
    with pytest.raises(KvbenchInputError) as caught:
        load_workload("chatt", 4, 0, 100)
    assert str(caught.value) == message
    with pytest.raises(KvbenchInputError, match="no parameter turns .*turns_per_conversation"):
        load_workload("chat", 4, 0, 100, turns=3)


def test_unknown_workload_on_the_command_line(tmp_path, capsys):
    argv = ["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--warmup", "0",
            "--workload", "nope", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "kvbench: error: unknown workload 'nope' (workloads: chat, sharegpt, lmsys, summarize, "
        "prefix-repeat, parallel, uniform; or a trace file)"
    ]


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
        load_workload(name, 4, 0, 100, **params)


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


# A workload as a user would write it: one module that registers itself.
EXTRA_WORKLOAD = '''
"""`echo`: every request repeats one token `prompt_len` times and answers `output_len`."""

from kvbench.core.request import Request
from kvbench.workloads import WORKLOADS, WorkloadEntry

DEFAULTS = {"prompt_len": 6, "output_len": 3}


def echo_requests(num_requests, seed, vocab_size, *, prompt_len, output_len):
    token = seed % vocab_size
    return [Request(i, 0.0, (token,) * prompt_len, output_len) for i in range(num_requests)]


WORKLOADS.add(WorkloadEntry("echo", echo_requests, DEFAULTS, "one token repeated, fixed lengths"))
'''


@pytest.fixture
def echo_workload(tmp_path):
    path = tmp_path / "echo_workload.py"
    path.write_text(EXTRA_WORKLOAD)
    spec = importlib.util.spec_from_file_location("echo_workload", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    WORKLOADS.remove("echo")


def test_a_workload_from_a_new_module_is_listed_and_runs(echo_workload, tmp_path, capsys):
    assert "echo" in WORKLOADS and not is_trace("echo")
    assert WORKLOADS.names() == [*BUILTINS, "echo"]  # after the built-ins

    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "  echo           one token repeated, fixed lengths\n" in listing
    assert "                 prompt_len=6, output_len=3\n" in listing

    assert parse_workload_params("echo", ["prompt_len=4"]) == {"prompt_len": 4}
    result = load_workload("echo", 5, 2, 100, prompt_len=4, request_rate=2.0)
    assert [r.prompt_token_ids for r in result.requests] == [(2, 2, 2, 2)] * 5
    assert [r.request_id for r in result.requests] == list(range(5))
    assert dict(result.params) == {"prompt_len": 4, "output_len": 3}
    with pytest.raises(KvbenchInputError, match=r"no parameter n \(parameters: prompt_len"):
        load_workload("echo", 5, 2, 100, n=2)

    out = tmp_path / "out"
    argv = ["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--warmup", "0",
            "--workload", "echo", "--workload-param", "output_len=2", "--json", "--out",
            str(out)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["workload"] == "echo"
    assert summary["num_requests"] == 4
