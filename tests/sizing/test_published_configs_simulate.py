"""`kvbench simulate --model DIR --strategy paged,hybrid` on each family's published
config.json: the run completes for both strategies, and `hybrid` holds no more KV per token
than `paged` (less where the model has sliding-window layers, the same where it has none:
under tensor parallelism too, where a latent-attention row is whole on every GPU)."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main
from tests.models.test_deepseek_sizing import DEEPSEEK_V3_CONFIG
from tests.models.test_gemma import GEMMA2_27B_CONFIG, GEMMA3_27B_IT_CONFIG
from tests.models.test_gpt_oss import GPT_OSS_20B_CONFIG
from tests.models.test_mixtral import MIXTRAL_8X7B_CONFIG
from tests.models.test_qwen3 import QWEN3_8B_CONFIG
from tests.models.test_qwen3_moe import QWEN3_30B_A3B_CONFIG

# mistralai/Mistral-7B-v0.1's config.json: every layer a 4096-token window.
MISTRAL_7B_CONFIG = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}

# name -> (config.json, extra simulate options, has sliding-window layers)
FAMILIES = {
    "mistral-7b": (MISTRAL_7B_CONFIG, [], True),
    "gemma-2-27b": (GEMMA2_27B_CONFIG, [], True),
    "gemma-3-27b-it": (GEMMA3_27B_IT_CONFIG, [], True),
    "gpt-oss-20b": (GPT_OSS_20B_CONFIG, [], True),
    "qwen3-8b": (QWEN3_8B_CONFIG, [], False),
    "qwen3-30b-a3b": (QWEN3_30B_A3B_CONFIG, [], False),
    "mixtral-8x7b": (MIXTRAL_8X7B_CONFIG, ["--tensor-parallel-size", "2"], False),
    "deepseek-v3": (DEEPSEEK_V3_CONFIG, ["--gpu", "h200", "--tensor-parallel-size", "8"], False),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_simulate_paged_and_hybrid_on_the_published_config(family, tmp_path, capsys):
    config, extra, windowed = FAMILIES[family]
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    options = extra if "--gpu" in extra else ["--gpu", "h100-80gb", *extra]
    code = main(["simulate", "--model", str(folder), "--strategy", "paged,hybrid",
                 "--workload", "summarize", "--workload-param", "input_mean=6000",
                 "--num-requests", "8", "--max-model-len", "8192", *options,
                 "--json", "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    runs = {s["strategy"]: s for s in json.loads(capsys.readouterr().out)}
    assert [runs[s]["completed"] for s in ("paged", "hybrid")] == [8, 8]
    paged = runs["paged"]["memory"]["kv_held_bytes_per_token"]
    hybrid = runs["hybrid"]["memory"]["kv_held_bytes_per_token"]
    if windowed:  # the window layers' blocks behind the window are freed (not during prefill)
        assert hybrid < paged
    else:
        assert hybrid == pytest.approx(paged, rel=0.05)
