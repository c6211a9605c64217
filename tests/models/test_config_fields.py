"""Every config.json field that changes the math is implemented (parity with transformers) or
refused with one line naming the key (a model that runs computes what transformers
computes)."""

from __future__ import annotations

import json

import pytest
import torch

import kvbench
from kvbench.errors import KvbenchInputError
from kvbench.kernels import reference as ops
from kvbench.models.loader import load_model
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
)
LLAMA3_ROPE = dict(
    rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
    high_freq_factor=4.0, original_max_position_embeddings=64,
)

# name -> (transformers config class, fields over BASE)
VARIANTS = {
    "llama-head-dim-32": ("LlamaConfig", dict(head_dim=32)),
    "llama-rms-eps-1e-2": ("LlamaConfig", dict(rms_norm_eps=1e-2)),
    "llama-attention-bias": ("LlamaConfig", dict(attention_bias=True)),
    "llama-mlp-bias": ("LlamaConfig", dict(mlp_bias=True)),
    "llama-rope-llama3": ("LlamaConfig", dict(rope_parameters=LLAMA3_ROPE)),
    "llama-rope-theta-500k": ("LlamaConfig", dict(rope_parameters={"rope_type": "default",
                                                                  "rope_theta": 500000.0})),
    "llama-swish": ("LlamaConfig", dict(hidden_act="swish")),
    # YaRN over 64 original positions; without the key, over max_position_embeddings
    "llama-rope-yarn": ("LlamaConfig", dict(rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64))),
    "qwen3-rope-yarn-default-length": ("Qwen3Config", dict(head_dim=16, rope_parameters=dict(
        rope_type="yarn", rope_theta=1e6, factor=4.0))),
    "qwen2-qkv-bias": ("Qwen2Config", dict(use_sliding_window=False)),
    "qwen2-tied": ("Qwen2Config", dict(tie_word_embeddings=True)),
    "mistral-window-covers-context": ("MistralConfig", dict(sliding_window=256)),
}


def make_checkpoint(folder, config_class: str, seed: int = 0, **fields):
    """A random transformers model saved to `folder`; biases randomised too (HF zeroes them)."""
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**BASE, **fields})
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return model


def kvbench_prefill_logits(folder, prompt: list[int]) -> torch.Tensor:
    model, config = load_model(str(folder))
    k_cache = torch.zeros(len(prompt), config.num_kv_heads, config.head_dim)
    v_cache = torch.zeros_like(k_cache)

    def attend(_layer, q, k, v):
        ops.write_kv(k, v, k_cache, v_cache, torch.arange(len(prompt)))
        return ops.contiguous_attention(
            q, k_cache, v_cache, torch.tensor([0]), torch.tensor([0, len(prompt)]),
            torch.tensor([len(prompt)]), config.head_dim**-0.5,
        )

    with torch.no_grad():
        return model.logits(model(torch.tensor(prompt), torch.arange(len(prompt)), attend))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_implemented_field_matches_transformers(variant, tmp_path):
    config_class, fields = VARIANTS[variant]
    hf_model = make_checkpoint(tmp_path, config_class, **fields)
    # 200 tokens: past llama3's original 64 positions, so the scaled frequencies matter
    prompt = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    ours = kvbench_prefill_logits(tmp_path, prompt)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_biases_are_read_from_the_config(tmp_path):
    """Llama's attention_bias covers o_proj; Qwen2 has q/k/v biases without the key."""
    make_checkpoint(tmp_path / "llama", "LlamaConfig", attention_bias=True, mlp_bias=True)
    make_checkpoint(tmp_path / "qwen2", "Qwen2Config")
    llama = resolve_model_config(str(tmp_path / "llama"))
    qwen2 = resolve_model_config(str(tmp_path / "qwen2"))
    assert (llama.attention_bias, llama.o_proj_bias, llama.mlp_bias) == (True, True, True)
    assert (qwen2.attention_bias, qwen2.o_proj_bias, qwen2.mlp_bias) == (True, False, False)


def test_qwen2_generates_transformers_greedy_tokens(tmp_path):
    """End to end through the engine (paged strategy), not only one prefill."""
    from tests.models.test_parity_hf import hf_greedy

    hf_model = make_checkpoint(tmp_path, "Qwen2Config")
    prompts = random_prompts(3, 512, seed=4, min_len=5, max_len=40)
    got = kvbench.generate(prompts, 12, model=str(tmp_path), kv_memory="1MiB", block_size=16)
    assert got == hf_greedy(hf_model, prompts, 12)


def write_config(folder, model_type: str = "llama", **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**BASE, "model_type": model_type, **fields}
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


REFUSED = {
    # name -> (model_type, fields, key the message names)
    "gelu": ("llama", dict(hidden_act="gelu"), "hidden_act"),
    "gelu-tanh": ("llama", dict(hidden_act="gelu_pytorch_tanh"), "hidden_act"),
    "rope-linear": ("llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
                    "rope_scaling"),
    "rope-yarn-unknown-key": ("llama", dict(rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "low_freq_factor": 1.0}), "low_freq_factor"),
    "rope-llama3-incomplete": ("llama", dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}),
                               "rope_scaling"),
    "partial-rotary": ("llama", dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    "quantized": ("llama", dict(quantization_config={"quant_method": "gptq"}),
                  "quantization_config"),
    "head-dim-zero": ("llama", dict(head_dim=0), "head_dim"),
    "hidden-size-text": ("llama", dict(hidden_size="64"), "hidden_size"),
    "mistral-window-negative": ("mistral", dict(sliding_window=-1), "sliding_window"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unimplemented_field_is_refused_naming_the_key(case, tmp_path):
    model_type, fields, key = REFUSED[case]
    folder = write_config(tmp_path / "m", model_type, **fields)
    with pytest.raises(KvbenchInputError, match=key):
        resolve_model_config(folder)


@pytest.mark.parametrize(
    ("config_class", "fields"),
    [
        ("MistralConfig", dict(sliding_window=16)),
        ("Qwen2Config", dict(use_sliding_window=True, sliding_window=16, max_window_layers=1)),
    ],
)
def test_window_shorter_than_the_context_matches_transformers(config_class, fields, tmp_path):
    """Prompts and generations several times the window: each windowed layer attends to its
    last W tokens only, as transformers' does (Qwen2: the layers from max_window_layers on)."""
    from tests.models.test_parity_hf import hf_greedy

    hf_model = make_checkpoint(tmp_path, config_class, **fields)
    prompts = random_prompts(2, 512, seed=6, min_len=40, max_len=70)
    got = kvbench.generate(prompts, 24, model=str(tmp_path), kv_memory="1MiB", max_model_len=128,
                           max_num_batched_tokens=128)
    assert got == hf_greedy(hf_model, prompts, 24)


def test_llama_ignores_sliding_window_as_transformers_does(tmp_path):
    folder = write_config(tmp_path / "m", "llama", sliding_window=8)
    assert resolve_model_config(folder).sliding_window is None


def test_mistral_preset_declares_its_window():
    """The preset's shape is Mistral-7B v0.1: every layer one 4096-token sliding-window group."""
    from kvbench.models.presets import get_preset

    (group,) = get_preset("mistral-7b").kv_groups(2)
    assert (group.attention, group.window, group.num_layers) == ("sliding", 4096, 32)
