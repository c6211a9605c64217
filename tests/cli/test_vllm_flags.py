"""vLLM's command line as it is: the seed example of vLLM's tutorials runs through `kvbench
simulate` unchanged, with vLLM's meaning for each flag; `--enable-prefix-caching` picks the
prefix-caching form of each strategy; the server's flags are taken and ignored with a warning,
flags whose knob kvbench does not model are refused in one line (docs/cli.md, vLLM's flags)."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.session.vllm_flags import IGNORED_FLAGS, UNMODELLED_FLAGS, prefix_caching_strategy
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import DEFAULT_GPU

# Qwen/Qwen2.5-7B-Instruct's config.json (the fields a KV cache depends on)
QWEN_CONFIG = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=3584,
    intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
    num_key_value_heads=4, max_position_embeddings=32768, vocab_size=152064,
    rope_theta=1000000.0, sliding_window=131072, use_sliding_window=False, max_window_layers=28,
    tie_word_embeddings=False, torch_dtype="bfloat16", rms_norm_eps=1e-06, hidden_act="silu")
COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"

SEED_EXAMPLE = ("Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 4 --gpu-memory-utilization 0.92 "
                "--max-num-seqs 256 --max-model-len 16384 --enable-prefix-caching "
                "--kv-cache-dtype fp8_e4m3").split()


@pytest.fixture
def qwen_cache(tmp_path, monkeypatch):
    """A hub cache holding Qwen2.5-7B-Instruct's config.json as huggingface_hub lays it out,
    and no hub to reach (HF_HUB_OFFLINE=1)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen2.5-7B-Instruct"
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text(json.dumps(QWEN_CONFIG))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def simulate(args, out, capsys):
    code = main(["simulate", *args, "--num-requests", "8", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (config_path,) = out.glob("*/config.json")
    return json.loads(config_path.read_text())["run"], json.loads(captured.out), captured.err


def test_vllm_serve_seed_example_runs_as_vllm_means_it(qwen_cache, tmp_path, capsys):
    run, summary, _ = simulate(["--model", *SEED_EXAMPLE], tmp_path / "r",
                               capsys)
    engine = run["engine"]
    assert engine["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert engine["strategy"] == "prefix"  # paged + --enable-prefix-caching
    assert engine["kv_cache_dtype"] == "fp8_e4m3"
    assert (engine["tensor_parallel_size"], engine["gpu_memory_utilization"],
            engine["max_num_seqs"], engine["max_model_len"]) == (4, 0.92, 256, 16384)
    assert summary["strategy"] == "prefix" and summary["completed"] == 8
    memory = summary["memory"]
    # fp8: one byte per element of K and V, 4 KV heads of 128 in each of 28 layers
    assert memory["kv_cache_dtype"] == "float8_e4m3fn"
    assert memory["kv_bytes_per_token"] == 28 * 2 * 4 * 128
    # the utilization is a share of each of the 4 GPUs, as in vLLM: 0.02 more of it is
    # 0.02 of four GPUs' memory more KV budget
    _, at_default, _ = simulate(["--model", *SEED_EXAMPLE, "--gpu-memory-utilization", "0.9"],
                                tmp_path / "default", capsys)
    gpu = get_gpu(DEFAULT_GPU)
    assert memory["kv_budget_bytes"] - at_default["memory"]["kv_budget_bytes"] == \
        pytest.approx(0.02 * 4 * gpu.reported_memory_bytes, rel=1e-6)


def test_the_server_flags_are_ignored_with_a_warning(qwen_cache, tmp_path, capsys):
    server = ["--host", "0.0.0.0", "--port", "8000", "--served-model-name", "qwen",
              "--trust-remote-code", "--disable-log-stats"]
    with_server, _, err = simulate(["--model", *SEED_EXAMPLE, *server], tmp_path / "a", capsys)
    plain, _, _ = simulate(["--model", *SEED_EXAMPLE], tmp_path / "b", capsys)
    assert with_server == plain  # nothing of the run changes
    for flag in ("--host", "--port", "--served-model-name", "--trust-remote-code",
                 "--disable-log-stats"):
        assert f"warning: vLLM's {flag} ignored" in err


@pytest.mark.parametrize("strategy, enable, expected", [
    (None, True, ("prefix", None)),
    ("paged", True, ("prefix", None)),
    ("paged,hybrid", True, ("prefix,hybrid-prefix", None)),
    ("prefix,hybrid-prefix", True, ("prefix,hybrid-prefix", None)),
    ("fp8", True, ("prefix", "fp8")),
    (None, False, ("paged", None)),
    ("prefix,hybrid-prefix,contiguous", False, ("paged,hybrid,contiguous", None)),
    ("fp8", False, ("fp8", None)),
])
def test_prefix_caching_picks_each_strategys_form(strategy, enable, expected):
    assert prefix_caching_strategy(strategy, enable, None) == expected


@pytest.mark.parametrize("strategy, kv_cache_dtype, names", [
    ("contiguous", None, "contiguous"),
    ("paged,contiguous", None, "contiguous"),
    ("all", None, "all"),
    ("paged,fp8", None, "fp8"),
])
def test_prefix_caching_refuses_what_it_cannot_mean(strategy, kv_cache_dtype, names):
    with pytest.raises(KvbenchInputError, match=names):
        prefix_caching_strategy(strategy, True, kv_cache_dtype)


def test_no_prefix_caching_overrides_defaults_vllm(tmp_path, capsys):
    run, _, _ = simulate(["--model", "llama-2-7b", "--defaults", "vllm",
                          "--no-enable-prefix-caching"], tmp_path / "r", capsys)
    assert run["engine"]["strategy"] == "paged"
    assert run["engine"]["chunked_prefill"] is True  # the other vLLM defaults stay


def test_fp8_with_prefix_caching_keeps_its_fp8_cache(tmp_path, capsys):
    run, summary, _ = simulate(["--model", "llama-2-7b", "--strategy", "fp8",
                                "--enable-prefix-caching"], tmp_path / "r", capsys)
    assert (run["engine"]["strategy"], run["engine"]["kv_cache_dtype"]) == ("prefix", "fp8")
    assert summary["memory"]["kv_cache_dtype"] == "float8_e4m3fn"


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_every_unmodelled_flag_is_refused_in_one_line(command, tmp_path, capsys):
    for flag in UNMODELLED_FLAGS:
        code = main([command, "--model", "tiny", flag, "1", "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2, flag
        assert err == f"kvbench: error: vLLM's {flag} is not modelled by kvbench " \
                      "(docs/cli.md, vLLM's flags)\n"
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args", [["-tp", "2"], ["--tensor-parallel-size", "2"],
                                  ["--quantization", "fp8"]])
def test_run_refuses_simulate_only_vllm_flags_in_one_line(args, tmp_path, capsys):
    assert main(["run", "--model", "tiny", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "modelled by kvbench simulate" in err


@pytest.mark.parametrize("value", ["fp8_e5m2", "bfloat16", "int8", "fp8_inc"])
def test_vllm_kv_cache_dtypes_kvbench_does_not_model_are_refused(value, tmp_path, capsys):
    code = main(["simulate", "--model", "llama-2-7b", "--kv-cache-dtype", value,
                 "--num-requests", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "auto, fp8, fp8_e4m3" in err


def test_vllm_dtype_spellings(tmp_path, capsys):
    for spelling, name in (("half", "float16"), ("float", "float32")):
        run, summary, _ = simulate(["--model", "llama-2-7b", "--dtype", spelling],
                                   tmp_path / spelling, capsys)
        assert run["engine"]["dtype"] == spelling
        assert summary["memory"]["kv_cache_dtype"] == name  # (auto: the model's dtype)


def test_the_documented_lists_are_the_accepted_ones():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = text.split("## vLLM's flags", 1)[1].split("\n## ", 1)[0]
    for flag, _ in IGNORED_FLAGS:
        assert f"`{flag}`" in section, flag
    for flag in UNMODELLED_FLAGS:
        assert f"`{flag}`" in section, flag
