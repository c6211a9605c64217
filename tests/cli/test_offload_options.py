"""`--kv-offload` and `--kv-offload-policy` on `kvbench simulate` and `kvbench run`: what is
refused, in one line with exit 2, and vLLM's `--kv-offloading-size` (GiB) as an alias."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main

SIM = ["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--quiet"]


@pytest.mark.parametrize("args, says", [
    (["--strategy", "paged", "--kv-offload", "8GiB"], "takes none"),
    (["--strategy", "contiguous", "--kv-offload", "8GiB"], "takes none"),
    (["--strategy", "prefix", "--kv-offload", "-1"], "more than 0"),
    (["--strategy", "prefix", "--kv-offload", "0"], "more than 0"),
    (["--strategy", "prefix", "--kv-offload", "100TiB"], "at most 64TiB"),
    (["--strategy", "prefix", "--kv-offload", "lots"], "cannot read size"),
    (["--strategy", "prefix", "--kv-offload", "1KiB"], "holds no block"),
    (["--strategy", "prefix", "--kv-offload", "8GiB", "--kv-offload-policy", "fifo"],
     "lru, arc"),
    (["--strategy", "prefix", "--preemption-mode", "swap"], "give --kv-offload"),
    (["--strategy", "prefix", "--kv-offload", "8GiB", "--preemption-mode", "swop"],
     "recompute, swap"),
    (["--model", "gpt-oss-20b", "--strategy", "hybrid-prefix", "--kv-offload", "8GiB",
      "--preemption-mode", "swap"], "does not swap"),
])
def test_refused_in_one_line(tmp_path, capsys, args, says):
    assert main([*SIM, *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_run_refuses_a_tier_for_transformers_cache(tmp_path, capsys):
    assert main(["run", "--engine", "hf", "--model", "tiny", "--strategy", "prefix",
                 "--kv-offload", "1GiB", "--num-requests", "2", "--quiet",
                 "--out", str(tmp_path)]) == 2
    assert "--engine hf" in capsys.readouterr().err


def test_vllm_alias_in_gib(tmp_path):
    assert main([*SIM, "--strategy", "prefix", "--kv-offloading-size", "2",
                 "--out", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    config = json.loads((folder / "config.json").read_text())
    assert config["run"]["engine"]["kv_offload"] == 2 << 30
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    block_bytes = 512 * 1024 * 16  # llama-2-7b bf16: 512 KiB a token, 16-token blocks
    assert summary["scheduler"]["host_blocks"] == (2 << 30) // block_bytes


def test_run_refuses_a_tier_the_host_cannot_hold_before_writing_anything(
        tmp_path, capsys, monkeypatch):
    """Planned, not built: one line, exit 2, and no results folder (not even `.partial`)."""
    import kvbench.build.model_executors as model_executors

    monkeypatch.setattr(model_executors, "available_bytes", lambda device: 1 << 30)
    out = tmp_path / "out"
    assert main(["run", "--model", "tiny", "--strategy", "prefix", "--kv-offload", "2GiB",
                 "--num-requests", "2", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GiB available; give a smaller --kv-offload" in err[0]
    assert not out.exists() or not any(out.iterdir())
