"""A Hugging Face model id as --model, as vLLM takes it: read from the hub cache laid out as
huggingface_hub lays it out (models--Org--Name/refs/<branch>, snapshots/<commit>/...), with
--revision, config.json alone for estimate and simulate, the weights for run; offline, an id
that is not cached is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.models.hub import with_revision
from kvbench.models.loader import load_model
from kvbench.models.resolve_config import resolve_model_config

huggingface_hub = pytest.importorskip("huggingface_hub")

MAIN = "0123456789abcdef0123456789abcdef01234567"
OLD = "89abcdef0123456789abcdef0123456789abcdef"
CONFIG = dict(model_type="llama", vocab_size=128, hidden_size=32, intermediate_size=64,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256)


def snapshot(cache, repo: str, commit: str, branch: str | None = None, **fields):
    """A snapshot of `repo` at `commit` as huggingface_hub caches it (`branch` points at it)."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    folder = repo_dir / "snapshots" / commit
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, **fields}))
    if branch is not None:
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "refs" / branch).write_text(commit)
    return folder


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snapshot(cache, "Org/Tiny", MAIN, "main")
    snapshot(cache, "Org/Tiny", OLD, "v1", num_hidden_layers=3)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_model_id_reads_the_cached_snapshot_of_main(hub_cache):
    config = resolve_model_config("Org/Tiny")
    assert config.name == "Org/Tiny" and config.num_layers == 2


@pytest.mark.parametrize("revision", [OLD, "v1"])
def test_revision_by_commit_or_branch(hub_cache, revision):
    assert resolve_model_config(with_revision("Org/Tiny", revision)).num_layers == 3


def test_uncached_id_offline_is_one_line(hub_cache):
    with pytest.raises(KvbenchInputError) as err:
        resolve_model_config("Org/Missing")
    message = str(err.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message and str(hub_cache) in message
    assert "hf download Org/Missing" in message


def test_revision_needs_a_model_id():
    with pytest.raises(KvbenchInputError, match="--revision v1: --model tiny"):
        with_revision("tiny", "v1")


def test_estimate_with_revision(hub_cache, capsys):
    code = main(["estimate", "--model", "Org/Tiny", "--revision", "v1", "--context", "128",
                 "--gpu-memory", "1GiB", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 2 * 3 * 2 * 8 * 2


def test_simulate_records_the_id_and_revision(hub_cache, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["simulate", "--model", "Org/Tiny", "--revision", "v1", "--num-requests", "4",
                 "--warmup", "0", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["engine"]["model"] == "Org/Tiny@v1"
    assert config["model_config"]["num_layers"] == 3


def test_estimate_and_simulate_need_config_json_only(hub_cache, capsys):
    """No weights in the cache: sizing still works (it never fetches them)."""
    code = main(["estimate", "--model", "Org/Tiny", "--context", "128", "--gpu-memory", "1GiB"])
    assert code == 0, capsys.readouterr().err


def test_run_loads_the_cached_weights(hub_cache):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.LlamaConfig(**{k: v for k, v in CONFIG.items()
                                            if k != "model_type"})
    folder = hub_cache / "models--Org--Tiny" / "snapshots" / MAIN
    transformers.LlamaForCausalLM(hf_config).save_pretrained(folder)
    decoder, config = load_model("Org/Tiny")
    saved = transformers.LlamaForCausalLM.from_pretrained(folder).model.embed_tokens.weight
    assert torch.equal(decoder.model.embed_tokens.weight, saved)


def test_run_without_cached_weights_is_one_line(hub_cache, tmp_path, capsys):
    code = main(["run", "--model", "Org/Tiny", "--num-requests", "2", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "safetensors" in err, err


def test_cli_reads_the_hub_environment(hub_cache, tmp_path):
    """HF_HUB_CACHE and HF_HUB_OFFLINE as a user sets them, in a fresh process."""
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    kvbench = [sys.executable, "-c", "import sys; from kvbench.cli import main; "
               "sys.exit(main(sys.argv[1:]))"]
    ok = subprocess.run([*kvbench, "estimate", "--model", "Org/Tiny",
                         "--context", "128", "--gpu-memory", "1GiB", "--json"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run([*kvbench, "estimate", "--model",
                              "Org/Missing", "--context", "128"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
