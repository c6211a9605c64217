"""vLLM's option names and defaults: its spellings are accepted wherever kvbench has the same
knob (config.json records kvbench's one name), and `--defaults vllm` runs with vLLM v1's
defaults for every option not given, an explicit option still winning."""

from __future__ import annotations

import json

import click
import pytest

from kvbench.cli import main
from kvbench.cli.run import run_command
from kvbench.cli.simulate import simulate_command
from kvbench.session.run_options import RunOptions, option_fields
from kvbench.session.session import parse_slo
from kvbench.sweep.options import canonical_name, run_config_for

# vLLM's spelling -> kvbench's field (vllm/engine/arg_utils.py, vllm/benchmarks/serve.py)
VLLM_NAMES = {
    "--enable-chunked-prefill": "chunked_prefill",
    "--kv-cache-memory-bytes": "kv_memory",
    "--num-prompts": "num_requests",
    "--num-warmups": "warmup",
    "--goodput": "slo",
    "--result-dir": "out",
    "-tp": "tensor_parallel_size",
}
SAMPLE_VALUES = {int: "3", float: "0.5", str: "2GiB"}


def test_every_vllm_name_is_an_alias_of_its_option():
    for flag, name in VLLM_NAMES.items():
        info = option_fields()[name]
        assert flag in info.flags
        if info.spec.per_run:
            assert canonical_name(flag) == name  # a sweep file may use it too


@pytest.mark.parametrize("command", [run_command, simulate_command], ids=["run", "simulate"])
def test_an_alias_parses_as_its_option(command):
    for name, info in option_fields().items():
        if command.name not in info.spec.kinds:
            continue
        for alias in info.spec.aliases:
            if info.is_flag:  # the spelling that is not the command's default
                negated = command.make_context(command.name, []).params[name]
                given = "--no-" if negated else "--"
                args = [[given + alias.removeprefix("--")],
                        [given + info.flag.removeprefix("--")]]
            else:
                value = "ttft:500" if name == "slo" else SAMPLE_VALUES[info.base_type]
                args = [[alias, value], [info.flag, value]]
            via_alias, via_flag = (command.make_context(command.name, list(a)).params
                                   for a in args)
            assert via_alias == via_flag, alias
            assert via_alias[name] != command.make_context(command.name, []).params[name]
    negated = command.make_context(command.name, ["--no-enable-chunked-prefill"]).params
    assert negated["chunked_prefill"] is False
    given = command.make_context(command.name, ["--enable-chunked-prefill"]).params
    assert given["chunked_prefill"] is True


def test_vllm_goodput_pairs_are_milliseconds():
    assert parse_slo("ttft:500 tpot:50") == parse_slo("ttft=500ms,tpot=50ms") == {
        "ttft": 500.0, "tpot": 50.0}
    assert parse_slo("e2el:2000") == {"e2e": 2000.0}  # vLLM names E2E latency e2el


def test_defaults_vllm_takes_vllm_v1_values_and_an_explicit_option_wins():
    classic = RunOptions.for_kind("simulate", defaults="classic")
    vllm = RunOptions.for_kind("simulate")  # on an A100 (the default GPU)
    assert vllm == RunOptions.for_kind("simulate", defaults="vllm")  # vLLM's: the default
    assert (classic.batching, classic.strategy, classic.chunked_prefill,
            classic.max_num_batched_tokens, classic.max_num_seqs, classic.warmup) == (
        "continuous", "paged", False, None, 256, 2)
    assert RunOptions.for_kind("simulate", defaults="kvbench") == classic  # its former name
    assert vllm.batching == "vllm-v1"
    assert (vllm.strategy, vllm.chunked_prefill, vllm.max_num_batched_tokens,
            vllm.max_num_seqs, vllm.warmup, vllm.kv_scale) == ("prefix", True, 2048, 256, 1,
                                                               None)
    h100 = RunOptions.for_kind("simulate", defaults="vllm", gpu="h100-80gb")
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    mine = RunOptions.for_kind("simulate", defaults="vllm", gpu="h200", max_num_seqs=8,
                               strategy="fp8", chunked_prefill=False)
    assert (mine.max_num_seqs, mine.strategy, mine.chunked_prefill) == (8, "fp8", False)
    assert mine.kv_scale == 1.0  # vLLM's scale without --calculate-kv-scales
    assert mine.max_num_batched_tokens is None  # no chunking: max(max_model_len, 2048)


def test_command_line_defaults_vllm_keeps_explicit_options(tmp_path, capsys):
    args = ["simulate", "--model", "llama-2-7b", "--num-prompts", "4", "--defaults", "vllm",
            "--gpu", "h100-80gb", "--max-num-seqs", "256", "--goodput", "ttft:500",
            "--result-dir", str(tmp_path), "--quiet"]
    assert main(args) == 0
    (config_path,) = tmp_path.glob("*/config.json")
    run = json.loads(config_path.read_text())["run"]
    assert run["defaults"] == "vllm"
    assert run["num_requests"] == 4 and "num_prompts" not in run  # kvbench's one name
    assert run["slo_ms"] == {"ttft": 500.0}
    engine = run["engine"]
    assert (engine["strategy"], engine["chunked_prefill"], engine["max_num_batched_tokens"],
            engine["max_num_seqs"]) == ("prefix", True, 8192, 256)  # 256: given, kept


def test_defaults_classic_is_recorded_by_that_name_also_when_spelled_kvbench(tmp_path):
    for name in ("classic", "kvbench"):
        args = ["simulate", "--model", "llama-2-7b", "--num-prompts", "4", "--defaults", name,
                "--out", str(tmp_path / name), "--quiet"]
        assert main(args) == 0
        (config_path,) = (tmp_path / name).glob("*/config.json")
        run = json.loads(config_path.read_text())["run"]
        assert run["defaults"] == "classic"
        assert (run["engine"]["batching"], run["engine"]["strategy"], run["warmup"]) == (
            "continuous", "paged", 2)


def test_help_shows_the_defaults_a_command_takes():
    for command in (run_command, simulate_command):
        text = " ".join(command.get_help(click.Context(command)).split())
        assert "[default: vllm]" in text and "[default: vllm-v1]" in text
        assert "[default: prefix]" in text


def test_a_sweep_point_takes_vllm_defaults_unless_classic():
    assert run_config_for("simulate", {}).executor.defaults == "vllm"
    classic = run_config_for("simulate", {"defaults": "classic"})
    assert (classic.executor.defaults, classic.engine.batching) == ("classic", "continuous")


def test_a_sweep_point_takes_defaults_vllm():
    point = run_config_for("simulate", {"defaults": "vllm", "gpu": "h200",
                                        "max_num_seqs": 64})
    assert point.executor.defaults == "vllm"
    assert (point.engine.strategy, point.engine.chunked_prefill,
            point.engine.max_num_batched_tokens, point.engine.max_num_seqs) == (
        "prefix", True, 8192, 64)
