"""Options that seem to contradict each other and are accepted with a documented meaning
(docs/cli.md, Contradictions); the refused ones are in test_bad_input_catalogue.py."""

from __future__ import annotations

import json

from kvbench.cli import main

SIM = ["simulate", "--model", "llama-2-7b", "--warmup", "0", "--quiet"]


def _folder(tmp_path):
    (folder,) = tmp_path.iterdir()
    return folder


def test_block_size_with_contiguous_only_is_warned_about_in_one_line(tmp_path, capsys):
    loud = [a for a in SIM if a != "--quiet"]
    assert main([*loud, "--num-requests", "4", "--strategy", "contiguous", "--block-size", "32",
                 "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("kvbench: warning:")]
    assert warnings == ["kvbench: warning: --block-size 32 is ignored: no strategy listed uses "
                        "blocks (contiguous reserves whole ranges)"]
    # A list with a strategy that uses blocks: nothing to warn about.
    assert main([*loud, "--num-requests", "4", "--strategy", "contiguous,paged",
                 "--block-size", "32", "--out", str(tmp_path / "b")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_chunked_prefill_lets_static_batching_run_prompts_longer_than_a_step(tmp_path):
    args = [*SIM, "--num-requests", "4", "--batching", "static", "--workload", "uniform",
            "--workload-param", "prompt_len=512", "--workload-param", "output_len=4",
            "--max-model-len", "1024", "--max-num-batched-tokens", "256",
            "--out", str(tmp_path)]
    # without chunking a 512-token prompt never fits a 256-token step
    assert main([*args, "--no-chunked-prefill"]) == 2
    assert main([*args, "--chunked-prefill"]) == 0
    summary = json.loads((_folder(tmp_path) / "kvbench_summary.json").read_text())
    assert summary["completed"] == 4 and summary["batching"] == "static"


def test_strategy_fp8_with_kv_cache_dtype_auto_is_paged_with_an_fp8_cache(tmp_path):
    assert main([*SIM, "--num-requests", "4", "--strategy", "fp8", "--kv-cache-dtype", "auto",
                 "--out", str(tmp_path)]) == 0
    config = json.loads((_folder(tmp_path) / "config.json").read_text())
    assert config["kv_cache_dtype"] == "float8_e4m3fn" and config["label"] == "fp8-vllm-v1"


def test_kv_scale_in_a_list_belongs_to_the_fp8_runs(tmp_path):
    assert main([*SIM, "--num-requests", "4", "--strategy", "paged,fp8", "--kv-scale", "0.05",
                 "--out", str(tmp_path)]) == 0
    root = _folder(tmp_path)
    scales = {label: json.loads((root / label / "config.json").read_text())["run"]["engine"]
              ["kv_scale"] for label in ("paged-vllm-v1", "fp8-vllm-v1")}
    assert scales == {"paged-vllm-v1": None, "fp8-vllm-v1": 0.05}


def test_strategy_all_on_an_fp8_cache_runs_paged_fp8_once(tmp_path):
    from kvbench.session.run_options import RunOptions
    from kvbench.session.runner import strategy_label
    from kvbench.session.session import expand_runs

    runs = expand_runs(RunOptions.for_kind("simulate", strategy="all", kv_cache_dtype="fp8"))
    labels = [strategy_label(r) for r in runs]
    assert "paged-fp8-vllm-v1" in labels and "fp8-vllm-v1" not in labels
    assert len(labels) == len(set(labels))
