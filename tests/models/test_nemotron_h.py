"""Nemotron-H (Mamba-2, attention and relu^2 MLP layers, one block each) in kvbench's engine
against transformers' NemotronHForCausalLM: logits of one prefill, and greedy tokens through
`paged` in prefill + decode, chunked prefill and preemption, with the recurrent states kept
in the KV arena's state blocks; `kvbench run` on the folder."""

from __future__ import annotations

import json
import math

import pytest
import torch

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_prefill_and_decode,
    check_state_preemption,
    check_state_prefix_hits,
    check_strategy_holds_state,
)
from tests.models.test_granite_hybrid import reference_prefill_logits

transformers = pytest.importorskip("transformers")

# Six layers "M*M-M-": three Mamba-2 (8 heads of 16 in 2 groups, d_state 16, a 32-token scan
# chunk that every scenario's prompts span several of), one attention (4 query / 2 KV heads
# of 16, head_dim not hidden / heads), two relu^2 MLPs.
TINY_NEMOTRON_H = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, hybrid_override_pattern="M*M-M-",
    num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=512,
    mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4,
    chunk_size=32, initializer_range=0.1, bos_token_id=None, eos_token_id=None,
    pad_token_id=None)


def make_nemotron_h(folder, seed: int = 0, **fields):
    """A random Nemotron-H saved to `folder`. transformers initialises A_log, D, dt_bias, the
    conv bias and the norms to constants (A = -1..-heads: fast decays); they are drawn here
    so that each one loaded wrong (or left out) changes tokens. Slow decays (A in [-0.5,
    -0.01], time steps near softplus(-2)) keep a state's effect alive across a whole
    prompt, so a state dropped or carried wrongly between chunks or steps changes the
    tokens."""
    torch.manual_seed(seed)
    config = transformers.NemotronHConfig(**{**TINY_NEMOTRON_H, **fields})
    model = transformers.NemotronHForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.uniform_(math.log(0.01), math.log(0.5))
            elif name.endswith("dt_bias"):
                param.normal_(-2.0, 0.5)
            elif name.endswith(("mixer.D", "conv1d.bias")):
                param.normal_(0.0, 0.5)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                param.normal_(1.0, 0.3)
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nemotron_h")
    return folder, make_nemotron_h(folder)


def test_config_reads_a_saved_nemotron_h(nemotron):
    """transformers 5 writes `layers_block_type` and `head_dim` (not the published files'
    pattern and attention_head_dim): kvbench reads the same layers and counts transformers'
    parameters."""
    folder, hf_model = nemotron
    written = json.loads((folder / "config.json").read_text())
    assert "hybrid_override_pattern" not in written and "layers_block_type" in written
    config = resolve_model_config(str(folder))
    assert config.hybrid.mixers == ("recurrent", "attention", "recurrent", "none",
                                    "recurrent", "none")
    assert (config.architecture, config.head_dim) == ("nemotron_h", 24)
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def test_pattern_and_block_types_read_alike():
    """The published keys (`hybrid_override_pattern`, `attention_head_dim`) and transformers
    5's give one config."""
    base = {"model_type": "nemotron_h", **{k: v for k, v in TINY_NEMOTRON_H.items()
                                           if k != "hybrid_override_pattern"}}
    published = {**base, "hybrid_override_pattern": "M*M-M-", "num_hidden_layers": 6,
                 "attention_head_dim": 24}
    del published["head_dim"]
    written = {**base, "layers_block_type": ["linear_attention", "full_attention",
                                             "linear_attention", "mlp", "linear_attention",
                                             "mlp"]}
    assert (ModelConfig.from_hf_config(published, "n")
            == ModelConfig.from_hf_config(written, "n"))


@pytest.mark.parametrize("key, value", [("time_step_limit", [0.0, 0.1]),
                                        ("mlp_hidden_act", "silu"),
                                        ("mamba_hidden_act", "gelu")])
def test_unmodelled_math_is_refused_in_one_line(key, value):
    hf = {"model_type": "nemotron_h", **TINY_NEMOTRON_H, "num_hidden_layers": 6, key: value}
    with pytest.raises(KvbenchInputError, match=key):
        ModelConfig.from_hf_config(hf, "n")


def test_prefill_logits_match_transformers(nemotron):
    """100 tokens (four scan chunks): logits within 1e-4 of transformers' (float32)."""
    folder, hf_model = nemotron
    prompt = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(reference_prefill_logits(folder, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_prefill_and_decode_match_transformers(nemotron):
    check_prefill_and_decode(*nemotron, 20, 100)


def test_chunked_prefill_matches_transformers(nemotron):
    """~190-token prompts under a 64-token step budget: each prompt's state carries over
    three or more chunks."""
    check_chunked_prefill(*nemotron, 150, 200)


def test_preemption_matches_transformers(nemotron):
    check_state_preemption(*nemotron)


def test_kvbench_run_on_a_nemotron_h_folder(nemotron, tmp_path, capsys):
    """`kvbench run --strategy paged` end to end: every request completes inside the
    --kv-memory arena, its state blocks counted as held without tokens (`internal`)."""
    folder, _ = nemotron
    assert main(["run", "--model", str(folder), "--strategy", "paged", "--workload",
                 "uniform", "--num-requests", "4", "--workload-param", "prompt_len=60",
                 "--workload-param", "output_len=8", "--kv-memory", "1MiB", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "kvbench_summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (4, 0)
    assert summary["memory"]["breakdown_mean"]["internal"] > 0


def test_prefix_hits_restore_state_checkpoints(nemotron):
    """`prefix` (vLLM's default `align`): greedy tokens equal transformers' with hits that
    copy a cached checkpoint into the running state."""
    folder, hf_model = nemotron
    check_state_prefix_hits(folder, hf_model)


@pytest.mark.parametrize("strategy", ["hybrid", "hybrid-prefix", "contiguous"])
def test_strategies_holding_the_state_match_transformers(nemotron, strategy):
    """The state where `strategy` holds it; the MLP-only layers hold neither KV nor state."""
    folder, hf_model = nemotron
    check_strategy_holds_state(folder, hf_model, strategy, 40, 120)
