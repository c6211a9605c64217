"""DeepSeek-V3: latent attention (q_lora_rank present and absent, interleaved rope, YaRN with
mscale) and routed experts (sigmoid scores, correction bias, group-limited top-k, routed
scaling, a shared expert, dense first layers), against transformers' DeepseekV3ForCausalLM;
the latent KV cache under every strategy."""

from __future__ import annotations

import pytest
import torch

import kvbench
from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.kernels import reference as ops
from kvbench.models.loader import load_model
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_preemption,
    check_prefill_and_decode,
    check_prefix_hit,
)
from tests.models.test_parity_hf import hf_greedy

transformers = pytest.importorskip("transformers")

# Eight routed experts in four groups, two groups and two experts a token, one shared expert,
# layer 0 dense; YaRN past 128 positions with mscale_all_dim != mscale, so the softmax scale
# and the cos/sin factor both differ from 1. A wrong router, scale or rope changes tokens.
TINY_DEEPSEEK_V3 = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
    q_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2,
    first_k_dense_replace=1, n_shared_experts=1, routed_scaling_factor=2.5,
    max_position_embeddings=512, initializer_range=0.15, bos_token_id=None, eos_token_id=None,
    pad_token_id=None,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                  "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1},
)
# 3 layers x (32 latent + 8 rope) x 4 B
LATENT_BYTES_PER_TOKEN = 3 * 40 * 4


def make_deepseek_v3(folder, seed: int = 0, **fields):
    """A random DeepseekV3ForCausalLM saved to `folder` (per-expert names); norm weights away
    from 1 and a correction bias away from 0, so that neither can be skipped unnoticed."""
    torch.manual_seed(seed)
    config = transformers.DeepseekV3Config(**{**TINY_DEEPSEEK_V3, **fields})
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.3 * torch.randn_like(buffer))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def deepseek_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deepseek_v3")
    return folder, make_deepseek_v3(folder)


@pytest.fixture(scope="module")
def deepseek_no_q_lora(tmp_path_factory):
    """q_proj instead of q_a_proj/q_b_proj, and plain (not YaRN) rope."""
    folder = tmp_path_factory.mktemp("deepseek_v3_q")
    return folder, make_deepseek_v3(folder, seed=1, q_lora_rank=None, rope_scaling=None)


def latent_prefill_logits(folder, prompt: list[int]) -> torch.Tensor:
    """One prefill through the reference ops over a `[T, 1, latent + rope]` cache."""
    model, config = load_model(str(folder))
    assert config.mla is not None
    cache = torch.zeros(len(prompt), 1, config.mla.latent_dim)
    slots = torch.arange(len(prompt))

    def attend(_layer, q, row, _value):
        ops.write_latent(row, cache, slots)
        return ops.contiguous_attention(
            q, cache, cache[..., : config.mla.kv_lora_rank], torch.tensor([0]),
            torch.tensor([0, len(prompt)]), torch.tensor([len(prompt)]), model.softmax_scale,
        )

    with torch.no_grad():
        return model.logits(model(torch.tensor(prompt), slots, attend))


def test_config_reads_deepseek_fields(deepseek_checkpoint):
    folder, hf_model = deepseek_checkpoint
    config = resolve_model_config(str(folder))
    assert config.mla.latent_dim == 40 and config.mla.q_lora_rank == 48
    assert config.mla.rope_interleave
    assert (config.num_local_experts, config.num_experts_per_tok) == (8, 2)
    assert config.dense_layers == (0,) and config.num_shared_experts == 1
    assert config.routing.scoring == "sigmoid" and config.routing.has_correction_bias
    assert (config.routing.n_group, config.routing.topk_group) == (4, 2)
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())
    assert config.kv_bytes_per_token(4) == LATENT_BYTES_PER_TOKEN


@pytest.mark.parametrize("checkpoint", ["deepseek_checkpoint", "deepseek_no_q_lora"])
def test_prefill_logits_match_transformers(checkpoint, request):
    folder, hf_model = request.getfixturevalue(checkpoint)
    # 200 tokens: past YaRN's original 128 positions
    prompt = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(latent_prefill_logits(folder, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_halves_rope_without_interleave_matches_transformers(tmp_path):
    hf_model = make_deepseek_v3(tmp_path, seed=2, rope_interleave=False)
    prompt = random_prompts(1, 512, seed=4, min_len=60, max_len=60)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(latent_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_fused_expert_names_load_as_the_per_expert_ones(deepseek_checkpoint, tmp_path):
    """transformers 5's module names (experts fused in [experts, ...] tensors) load into the
    same weights as DeepSeek's per-expert names."""
    from safetensors.torch import save_file

    folder, hf_model = deepseek_checkpoint
    state = {k: v.contiguous() for k, v in hf_model.state_dict().items()}
    assert "model.layers.1.mlp.experts.gate_up_proj" in state
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    per_expert, _ = load_model(str(folder))
    fused, _ = load_model(str(tmp_path))
    for (name, a), (_, b) in zip(per_expert.state_dict().items(), fused.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_prefill_and_decode_match_transformers(deepseek_checkpoint):
    check_prefill_and_decode(*deepseek_checkpoint, min_len=180, max_len=240)


def test_prefill_and_decode_without_q_lora_match_transformers(deepseek_no_q_lora):
    check_prefill_and_decode(*deepseek_no_q_lora, min_len=100, max_len=160)


def test_chunked_prefill_matches_transformers(deepseek_checkpoint):
    check_chunked_prefill(*deepseek_checkpoint, min_len=180, max_len=240)


def test_preemption_matches_transformers(deepseek_checkpoint):
    """197 KiB hold 420 tokens of the 480 B latent rows."""
    check_preemption(*deepseek_checkpoint, kv_memory="197KiB")


def test_prefix_hit_matches_transformers(deepseek_checkpoint):
    check_prefix_hit(*deepseek_checkpoint)


# The latent cache under every strategy ----------------------------------------------------


def test_arena_holds_one_latent_tensor_per_layer(deepseek_checkpoint):
    """One [slots, 1, latent + rope] tensor a layer, V a view of its latent: the arena's
    bytes are the latent rows', not K and V."""
    folder, _ = deepseek_checkpoint
    built = build_engine(EngineConfig(model=str(folder), device="cpu", kv_memory="480KiB"))
    arena = built.engine.executor.arena
    assert arena.num_slots == 480 * 1024 // LATENT_BYTES_PER_TOKEN
    assert [tuple(k.shape) for k in arena.k] == [(arena.num_slots, 1, 40)] * 3
    for k, v in zip(arena.k, arena.v, strict=True):
        assert v.shape[-1] == 32 and v.data_ptr() == k.data_ptr()
    assert arena.nbytes == arena.num_slots * LATENT_BYTES_PER_TOKEN


@pytest.mark.parametrize(("strategy", "options"), [
    ("contiguous", {"reserve": "max"}),
    ("paged", {"block_size": 16}),
    ("prefix", {"block_size": 16}),
    ("hybrid", {"block_size": 16}),
    ("hybrid-prefix", {"block_size": 16}),
])
def test_every_strategy_gives_transformers_tokens(deepseek_checkpoint, strategy, options):
    folder, hf_model = deepseek_checkpoint
    prompts = random_prompts(3, 512, seed=7, min_len=20, max_len=60)
    got = kvbench.generate(prompts, 12, model=str(folder), strategy=strategy,
                           kv_memory="1MiB", **options)
    assert got == hf_greedy(hf_model, prompts, 12)


def test_fp8_latent_cache_has_one_scale_per_layer(deepseek_checkpoint):
    """fp8: the latent row stored as e4m3 with one per-tensor scale a layer (its value view
    read with the same scale); greedy tokens stay close to float32's."""
    folder, hf_model = deepseek_checkpoint
    prompts = random_prompts(2, 512, seed=8, min_len=40, max_len=60)
    built = build_engine(EngineConfig(model=str(folder), device="cpu", strategy="fp8",
                                      kv_memory="1MiB"))
    engine = built.engine
    for i, prompt in enumerate(prompts):
        engine.add_request(Request(i, 0.0, tuple(prompt), 8))
    engine.run_to_completion()
    arena = engine.executor.arena
    assert arena.is_fp8 and arena.nbytes == arena.num_slots * LATENT_BYTES_PER_TOKEN // 4
    scales = arena.scales()
    assert None not in scales["k"] and scales["k"] == scales["v"]
    got = [engine.sequences[i][0].token_ids[len(p):] for i, p in enumerate(prompts)]
    expected = hf_greedy(hf_model, prompts, 8)
    assert [g[0] for g in got] == [e[0] for e in expected]


@pytest.mark.parametrize(("strategy", "options"),
                         [("paged", {"block_size": 8}), ("contiguous", {"reserve": "exact"})])
def test_triton_backend_gives_transformers_tokens(deepseek_checkpoint, strategy, options):
    """On the Triton backend (interpreted on the CPU by the root conftest) decode runs the
    MLA decode kernel over the latent cache, prefill the reference: transformers' tokens."""
    folder, hf_model = deepseek_checkpoint
    prompts = random_prompts(2, 512, seed=9, min_len=20, max_len=30)
    built = build_engine(EngineConfig(model=str(folder), device="cpu", strategy=strategy,
                                      kv_memory="1MiB", attention_backend="triton", **options))
    assert built.engine.executor.backend_name == "triton"
    engine = built.engine
    for i, prompt in enumerate(prompts):
        engine.add_request(Request(i, 0.0, tuple(prompt), 6))
    engine.run_to_completion()
    got = [engine.sequences[i][0].token_ids[len(p):] for i, p in enumerate(prompts)]
    assert got == hf_greedy(hf_model, prompts, 6)
