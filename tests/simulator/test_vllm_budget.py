"""simulate's KV budget follows vLLM's flags as `kvbench estimate` does (one start-up model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.cli import main
from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError

BASE = EngineConfig(model="llama-3-8b", dtype="bfloat16", max_model_len=8192)


def _budget(**changes) -> int:
    return build_engine(replace(BASE, **changes), SimulatedExecutors("h100-80gb")).kv_budget_bytes


def _terms(**changes) -> dict:
    return build_engine(replace(BASE, **changes), SimulatedExecutors("h100-80gb")).kv_budget_terms


def test_enforce_eager_leaves_the_cuda_graphs_to_kv():
    graphs = _terms()["stages"][0]
    assert graphs["cuda_graphs_subtracted"] and graphs["cuda_graphs"] > 0
    assert _budget(enforce_eager=True) == _budget() + graphs["cuda_graphs"]


def test_quantization_fp8_halves_the_loaded_weights():
    bf16, fp8 = _terms()["stages"][0], _terms(quantization="fp8")["stages"][0]
    assert fp8["weights"] < bf16["weights"] * 0.6
    assert _budget(quantization="fp8") > _budget()
    with pytest.raises(KvbenchInputError, match="only fp8"):
        _budget(quantization="awq")


def test_an_older_vllm_does_not_subtract_its_graphs():
    old = _terms(vllm_version="0.11")
    assert old["vllm_version"] != _terms()["vllm_version"]
    assert not old["stages"][0]["cuda_graphs_subtracted"]


def test_weights_memory_and_kv_memory_override():
    given = _terms(weights_memory="20GiB")
    assert given["weights_source"] == "given" and given["stages"][0]["weights"] == 20 * 2**30
    assert _budget(weights_memory="20GiB") < _budget()
    assert _budget(kv_memory="3GiB") == 3 * 2**30 and _terms(kv_memory="3GiB") is None


def test_cli_flags_land_in_config_json(tmp_path):
    assert main(["simulate", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--num-requests",
                 "2", "--max-model-len", "8192", "--enforce-eager", "--quantization", "fp8",
                 "--vllm-version", "0.11", "--quiet", "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    config = json.loads((run / "config.json").read_text())
    engine = config["run"]["engine"]
    assert (engine["enforce_eager"], engine["quantization"], engine["vllm_version"]) == (
        True, "fp8", "0.11")
    terms = config["kv_budget_terms"]
    assert terms["cuda_graphs_captured"] == {"piecewise": 0, "full": 0}
    assert terms["available_kv_cache_bytes"] == config["kv_budget_bytes"]


def test_a_sweep_takes_them_as_axes(tmp_path, capsys):
    assert main(["sweep", "--simulate", "--model", "llama-3-8b", "--gpu", "h100-80gb",
                 "--num-requests", "2", "--max-model-len", "8192", "--vllm-version",
                 "0.11,0.21", "--axis", "enforce_eager=true,false", "--dry-run",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for point in ("vllm_version=0.11", "vllm_version=0.21", "enforce_eager=true",
                  "enforce_eager=false"):
        assert point in out, point
