"""`kvbench run` end to end on the CPU: files, summary keys, comparisons, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.results.run_folder import is_whole

SMALL = ["--num-requests", "12", "--warmup", "1", "--kv-memory", "16MiB", "--quiet"]

SUMMARY_KEYS = {
    "strategy", "batching", "workload", "model", "device", "seed", "num_requests", "completed",
    "failed", "duration_s", "throughput", "latency_ms", "memory", "scheduler",
}
REQUEST_COLUMNS = {
    "request_id", "arrival_s", "prompt_len", "output_len", "n", "admitted_s", "first_token_s",
    "finish_s", "queue_ms", "prefill_ms", "ttft_ms", "tpot_ms", "e2e_ms", "preemptions",
    "cached_prompt_tokens",
}
STEP_COLUMNS = {
    "step", "t_s", "step_ms", "overhead_ms", "num_prefill_seqs", "num_decode_seqs",
    "num_batched_tokens", "num_running", "num_waiting", "kv_token_bytes", "kv_reserved_bytes",
    "kv_internal_bytes", "kv_external_bytes", "kv_free_bytes", "kv_cached_bytes", "preemptions",
}


def run_dirs(out):
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_run_writes_the_results_contract(tmp_path, capsys):
    assert main(["run", "--strategy", "paged", "--workload", "chat", "--out", str(tmp_path),
                 *SMALL]) == 0
    (folder,) = run_dirs(tmp_path)
    assert capsys.readouterr().out.strip() == str(folder)
    assert is_whole(folder) and not folder.name.endswith(".partial")
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["completed"] == 12 and summary["failed"] == 0
    assert set(summary["latency_ms"]["ttft"]) == {"mean", "p50", "p90", "p99", "max"}
    mem = summary["memory"]
    assert mem["kv_budget_bytes"] == 16 * 2**20
    # tiny model, fp32: 2 (K,V) x 4 layers x 2 KV heads x 32 dims x 4 bytes = 2048 B/token
    assert mem["kv_capacity_tokens"] == 16 * 2**20 // 2048
    assert 0.9 < mem["utilization_mean"] <= 1.0
    assert mem["peak_gpu_bytes"] is None
    parts = mem["breakdown_mean"]
    assert sum(parts[p] for p in ("token", "reserved", "internal", "external", "free")) == \
        pytest.approx(1.0)
    requests = pd.read_csv(folder / "requests.csv")
    steps = pd.read_csv(folder / "steps.csv")
    assert REQUEST_COLUMNS <= set(requests.columns)
    assert STEP_COLUMNS <= set(steps.columns)
    assert (requests["output_tokens"] == requests["output_len"]).all()
    assert (steps["overhead_ms"] <= steps["step_ms"]).all()
    config = json.loads((folder / "config.json").read_text())
    assert config["run"]["engine"]["block_size"] == 16
    assert config["versions"]["torch"]


def test_static_batching_with_sjf_runs_and_config_records_the_queue_order(tmp_path, capsys):
    assert main(["run", "--batching", "static", "--queue-order", "sjf", "--num-requests", "6",
                 "--out", str(tmp_path), "--quiet"]) == 0
    (folder,) = run_dirs(tmp_path)
    assert capsys.readouterr().out.strip() == str(folder)
    assert folder.name.endswith("-prefix-static-sjf-chat")  # vLLM's prefix caching: the default
    engine = json.loads((folder / "config.json").read_text())["run"]["engine"]
    assert engine["batching"] == "static" and engine["queue_order"] == "sjf"
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["completed"] == 6 and summary["label"] == "prefix-static-sjf"


def test_contiguous_max_holds_far_more_memory_per_token_than_paged(tmp_path, capsys):
    assert main(["run", "--strategy", "contiguous,paged", "--workload", "chat",
                 "--out", str(tmp_path), *SMALL, "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out)
    by_label = {s["label"]: s for s in summaries}
    contiguous = by_label["contiguous-max-vllm-v1"]["memory"]["utilization_mean"]
    paged = by_label["paged-vllm-v1"]["memory"]["utilization_mean"]
    assert contiguous < 0.4 and paged > 0.9
    (root,) = run_dirs(tmp_path)
    assert (root / "comparison.csv").is_file()
    assert {p.name for p in run_dirs(root)} == {"contiguous-max-vllm-v1", "paged-vllm-v1"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "nope"], "unknown strategy 'nope'"),
        (["--workload", "nope"], "unknown workload 'nope'"),
        (["--model", "nope"], "unknown model preset 'nope'"),
        (["--kv-memory", "64KiB"], "--kv-memory too small"),
        (["--kv-memory", "lots"], "cannot read size"),
        (["--batching", "eager"], "unknown --batching"),
        (["--batching", "sjf"], "sjf is a queue order, use --queue-order sjf"),
        (["--queue-order", "lifo"], "unknown --queue-order 'lifo' (choose from fcfs, sjf"),
        (["--block-size", "12"], "power of two"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["run", "--out", str(out), *SMALL, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvbench: error:") and message in err
    assert "\n" not in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_model_folder_without_config_json(tmp_path, capsys):
    empty = tmp_path / "model"
    empty.mkdir()
    assert main(["run", "--model", str(empty), "--out", str(tmp_path / "o"), *SMALL]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_kv_memory_error_says_how_much_is_needed(tmp_path, capsys):
    assert main(["run", "--strategy", "contiguous", "--kv-memory", "1MiB",
                 "--out", str(tmp_path), *SMALL[:4]]) == 2
    err = capsys.readouterr().err
    # reserve max = 2048 slots x 2048 B = 4 MiB
    assert "needs 2048 KV slots (4.00 MiB)" in err and "--kv-memory 4MiB" in err


def test_prompt_longer_than_max_model_len_is_rejected_by_generate():
    import kvbench
    from kvbench.errors import KvbenchInputError

    with pytest.raises(KvbenchInputError, match="exceed the maximum model length"):
        kvbench.generate([[1] * 300], 8, max_model_len=256, kv_memory="4MiB")


def test_console_script_exit_code_and_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from kvbench.cli import main; sys.exit(main())",
         "run", "--strategy", "bogus", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_list_shows_every_kind_of_choice(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("contiguous", "paged", "continuous", "static", "chat", "tiny", "llama-3-8b"):
        assert word in out
