"""Published `config.json` files of three state-space hybrids, as dicts.

No hub access here: written from the published files' values. Qwen3-Next-80B-A3B-Instruct's
and Nemotron-H-8B-Base-8K's as their model repositories publish them (Nemotron-H's pattern
and keys also as vLLM's and other projects' tests quote them); Granite-4.0-H-Small's sizes
(72 experts of 768, 10 a token, a shared MLP of 1536, Mamba-2 of 128 heads x 64, d_state 128,
one group) as published; its `layer_types` put the 4 attention layers of 40 at 5, 15, 25 and
35, where Granite-4.0-H-Tiny's published file puts them (which layers they are changes no
size kvbench computes; only their count does). Each model's parameter count is checked
against transformers' model built from it (test_hybrid_models.py): Qwen3-Next-80B-A3B's
79,674,391,296 (3,874,929,408 active) is the published figure.
"""

# Qwen/Qwen3-Next-80B-A3B-Instruct
QWEN3_NEXT_80B_A3B_CONFIG = {
  "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
  "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
  "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True,
  "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
  "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False,
  "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None,
  "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0",
  "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
# ibm-granite/granite-4.0-h-small
GRANITE_4_H_SMALL_CONFIG = {
  "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
  "attention_multiplier": 0.0078125, "bos_token_id": 100257, "embedding_multiplier": 12,
  "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096, "init_method": "mup",
  "initializer_range": 0.1, "intermediate_size": 768,
  "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9
                  + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4),
  "logits_scaling": 16, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_d_conv": 4,
  "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
  "mamba_n_heads": 128, "mamba_proj_bias": False, "max_position_embeddings": 131072,
  "model_type": "granitemoehybrid", "normalization_function": "rmsnorm",
  "num_attention_heads": 32, "num_experts_per_tok": 10, "num_hidden_layers": 40,
  "num_key_value_heads": 8, "num_local_experts": 72, "output_router_logits": False,
  "pad_token_id": 100256, "position_embedding_type": "nope", "residual_multiplier": 0.22,
  "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000, "router_aux_loss_coef": 0.01,
  "shared_intermediate_size": 1536, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
  "transformers_version": "4.56.0", "use_cache": True, "vocab_size": 100352}
# nvidia/Nemotron-H-8B-Base-8K
NEMOTRON_H_8B_CONFIG = {
  "architectures": ["NemotronHForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
  "attention_head_dim": 128, "bos_token_id": 1, "chunk_size": 128, "conv_kernel": 4,
  "eos_token_id": 2, "expand": 2, "hidden_dropout": 0.0, "hidden_size": 4096,
  "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
  "initializer_range": 0.02, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
  "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
  "mamba_proj_bias": False, "max_position_embeddings": 8192, "mlp_bias": False,
  "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
  "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
  "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": True,
  "residual_in_fp32": False, "rms_norm_eps": 1e-05, "sliding_window": None,
  "ssm_state_size": 128, "tie_word_embeddings": False, "time_step_floor": 0.0001,
  "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 256,
  "torch_dtype": "bfloat16", "transformers_version": "4.48.0.dev0", "use_bias": False,
  "use_cache": True, "use_conv_bias": True, "use_mamba_kernels": True, "vocab_size": 131072}
