"""`--kv-offload` as a sweep axis: a list of host-tier sizes, `0` or `none` a point without a
tier; the printed table shows the prefix hit rate where the grid has a prefix cache."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main
from kvbench.sweep.config import SweepSpec
from kvbench.sweep.grid import expand_grid

SIM = ["--simulate", "--model", "llama-2-7b", "--strategy", "prefix", "--workload", "chat",
       "--workload-param", "think_time_s=5", "--workload-param", "system_prompt_len=256",
       "--workload-param", "turns_per_conversation=3",
       "--workload-param", "num_system_prompts=4", "--num-requests", "24",
       "--request-rate", "2", "--kv-memory", "1GiB", "--warmup", "0"]


@pytest.mark.parametrize("none", ["0", "none", "0GiB"])
def test_zero_or_none_is_a_point_without_a_tier(none):
    spec = SweepSpec(kind="simulate", base={"model": "llama-2-7b", "strategy": "prefix"},
                     axes={"kv_offload": [none, "2GiB", "4"]}).normalize()
    points = expand_grid(spec)
    assert [p.point_id for p in points] == ["kv_offload=none", "kv_offload=2GiB",
                                            "kv_offload=4"]
    assert [p.run.engine.kv_offload for p in points] == [None, 2 << 30, 4 << 30]


def test_a_size_and_no_tier_twice_is_refused(tmp_path, capsys):
    assert main(["sweep", *SIM, "--kv-offload", "0,2GiB,none", "--dry-run",
                 "--out", str(tmp_path)]) == 2
    assert "lists a value twice" in capsys.readouterr().err


def test_a_host_tier_sweep_runs_each_size(tmp_path, capsys):
    assert main(["sweep", *SIM, "--kv-offload", "none,2GiB", "--out", str(tmp_path),
                 "--name", "s"]) == 0
    printed = capsys.readouterr().out
    (header,) = [line for line in printed.splitlines() if line.startswith("point ")]
    assert "prefix hit" in header and "TTFT p50" in header
    none = json.loads((tmp_path / "s" / "kv_offload=none" / "kvbench_summary.json").read_text())
    tier = json.loads((tmp_path / "s" / "kv_offload=2GiB" / "kvbench_summary.json").read_text())
    assert "host_blocks" not in none["scheduler"]
    assert tier["scheduler"]["host_blocks"] == (2 << 30) // (512 * 1024 * 16)
    for summary in (none, tier):
        assert summary["completed"] == 24
        # the reuse-distance curve marks the tier's size where there is one
        assert summary["scheduler"]["kv_reuse_curve"]["host_blocks"] == (
            summary["scheduler"].get("host_blocks"))
