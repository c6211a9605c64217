"""`--mamba-cache-mode` on `kvbench simulate`: vLLM's default for a state-space hybrid
(`align` under `prefix`, which `--defaults vllm` picks), what is refused in one line with exit
2, and the hit rate reported beside its structural ceiling."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main

SIM = ["simulate", "--model", "granite-4.0-h-small", "--gpu", "h100-80gb", "--max-model-len",
       "8192", "--num-requests", "24", "--workload", "prefix-repeat", "--workload-param",
       "prefix_len=2000"]


def _run(tmp_path, capsys, *args) -> dict:
    assert main([*SIM, *args, "--json", "--out", str(tmp_path)]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args, says", [
    (["--mamba-cache-mode", "sometimes"], "none"),
    (["--strategy", "paged", "--mamba-cache-mode", "align"], "--mamba-cache-mode align"),
    (["--strategy", "hybrid-prefix", "--mamba-cache-mode", "all"], "prefix does"),
    (["--kv-offload", "8GiB"], "not offloaded"),
])
def test_refused_in_one_line(tmp_path, capsys, args, says):
    assert main([*SIM, *args, "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_vllm_defaults_cache_prefixes_of_a_hybrid_in_align_mode(tmp_path, capsys):
    run = _run(tmp_path, capsys)
    sch = run["scheduler"]
    assert run["strategy"] == "prefix" and run["block_size"] == 528
    # 2,000-token prefixes: three 528-token blocks the layout allows, hit where kept
    assert 0 < sch["prefix_hit_rate"] <= sch["prefix_hit_ceiling"] < 1
    assert sch["state_checkpoints"] > 0


def test_none_serves_nothing_of_what_the_layout_allows(tmp_path, capsys):
    sch = _run(tmp_path, capsys, "--mamba-cache-mode", "none")["scheduler"]
    assert sch["prefix_hit_rate"] == 0 and sch["prefix_hit_ceiling"] > 0


def test_all_rounds_the_block_to_the_scan_chunk(tmp_path, capsys):
    run = _run(tmp_path, capsys, "--mamba-cache-mode", "all")
    assert run["block_size"] == 768  # 3 x Granite's 256-token mamba_chunk_size
    assert run["scheduler"]["prefix_hit_rate"] > 0
