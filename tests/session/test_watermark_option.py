"""`--watermark`: vLLM v1's 0 by default, kvbench's classic 0.01 (vLLM v0's) under `--defaults
classic`, an explicit value winning, in `config.json` and as a sweep axis."""

from __future__ import annotations

import json

from kvbench.cli import main
from kvbench.session.run_options import RunOptions
from kvbench.sweep.options import run_config_for


def test_watermark_defaults():
    for kind in ("simulate", "run"):
        assert RunOptions.for_kind(kind).watermark == 0.0
        assert RunOptions.for_kind(kind, defaults="vllm").watermark == 0.0
        assert RunOptions.for_kind(kind, defaults="classic").watermark == 0.01
        assert RunOptions.for_kind(kind, defaults="kvbench").watermark == 0.01  # former name
    assert RunOptions.for_kind("simulate", watermark=0.05).watermark == 0.05
    assert RunOptions.for_kind("simulate", defaults="classic", watermark=0.05).watermark == 0.05


def test_command_line_watermark_lands_in_the_engine_config(tmp_path):
    args = ["simulate", "--model", "llama-2-7b", "--num-prompts", "4", "--watermark", "0.2",
            "--out", str(tmp_path), "--quiet"]
    assert main(args) == 0
    (config_path,) = tmp_path.glob("*/config.json")
    assert json.loads(config_path.read_text())["run"]["engine"]["watermark"] == 0.2


def test_watermark_out_of_range_is_refused(tmp_path, capsys):
    args = ["simulate", "--model", "llama-2-7b", "--num-prompts", "4", "--watermark", "1",
            "--out", str(tmp_path), "--quiet"]
    assert main(args) == 2
    assert "--watermark must be in [0, 1)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_sweep_point_takes_a_watermark():
    assert run_config_for("simulate", {"watermark": 0.1}).engine.watermark == 0.1
    assert run_config_for("simulate", {}).engine.watermark == 0.0
    assert run_config_for("simulate", {"defaults": "classic"}).engine.watermark == 0.01
