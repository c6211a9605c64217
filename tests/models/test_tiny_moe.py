"""The `tiny-moe` preset: `tiny`'s attention and KV cache with a Mixtral-style mixture of
experts, the CPU's model for comparing strategies on an MoE. Its size against transformers'
MixtralForCausalLM, and every strategy running on it through the real engine."""

from __future__ import annotations

import json

import pytest
import torch

from kvbench.cli import main
from kvbench.models.presets import get_preset
from kvbench.models.resolve_config import resolve_model_config

transformers = pytest.importorskip("transformers")

# The transformers config of the same shape (Mixtral: every expert intermediate_size wide;
# tiny's rope base, not Mixtral's default 1e6).
TINY_MOE_MIXTRAL = dict(
    vocab_size=2048, hidden_size=256, intermediate_size=344, num_hidden_layers=4,
    num_attention_heads=8, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
    max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=False,
)


def test_preset_is_a_mixtral_config_of_that_shape(tmp_path):
    """The preset reads back from the config.json transformers writes for the same shape, and
    transformers counts the same parameters (every expert, and the routers)."""
    preset = get_preset("tiny-moe")
    hf_config = transformers.MixtralConfig(**TINY_MOE_MIXTRAL)
    hf_config.save_pretrained(tmp_path)
    from_file = resolve_model_config(str(tmp_path))
    assert {**preset.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    with torch.device("meta"):
        hf_model = transformers.MixtralForCausalLM(hf_config)
    assert preset.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def test_a_token_computes_what_it_computes_on_tiny():
    """Two experts of half tiny's width: the active parameters are tiny's plus the routers,
    and the KV cache is tiny's, so a comparison on it differs from tiny's only in the MLP."""
    moe, dense = get_preset("tiny-moe"), get_preset("tiny")
    routers = moe.num_layers * moe.num_local_experts * moe.hidden_size
    assert moe.num_active_parameters() == dense.num_parameters() + routers
    assert moe.num_parameters() > 2 * dense.num_parameters()
    assert moe.kv_groups(4) == dense.kv_groups(4)


def test_every_strategy_runs_on_it(tmp_path, capsys):
    """docs/findings.md's comparison on it, cut to four chat turns: every request of every strategy
    completes, the prefix cache hits on the resent history, fp8 holds 4x float32's tokens."""
    out = tmp_path / "out"
    code = main(["run", "--model", "tiny-moe", "--strategy", "contiguous,paged,prefix,fp8",
                 "--workload", "chat", "--workload-param", "output_len=4,8",
                 "--num-requests", "4", "--warmup", "0", "--max-model-len", "512",
                 "--kv-memory", "1MiB", "--json", "--out", str(out), "--defaults", "classic"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    runs = {s["label"]: s for s in json.loads(captured.out)}
    assert list(runs) == ["contiguous-max", "paged", "prefix", "fp8"]
    for label, summary in runs.items():
        assert (summary["completed"], summary["failed"]) == (4, 0), label
        assert summary["throughput"]["output_tok_s"] > 0, label
    assert runs["prefix"]["scheduler"]["prefix_hit_rate"] > 0
    assert runs["paged"]["scheduler"]["prefix_hit_rate"] == 0
    capacity = {label: s["memory"]["kv_capacity_tokens"] for label, s in runs.items()}
    assert capacity["fp8"] == 4 * capacity["paged"]
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "paged" / "config.json").read_text())["model_config"]
    assert (saved["num_local_experts"], saved["num_experts_per_tok"]) == (8, 2)
