"""Attention and KV-write kernels: PyTorch reference (CPU path, ground truth) and Triton (GPU path).

Every kernel reads the KV arena of one layer as two tensors `k_cache`, `v_cache` of shape
`[num_slots, num_kv_heads, head_dim]`. A paged cache addresses slot
`block_table[pos // block_size] * block_size + pos % block_size`; a contiguous cache addresses
slot `start_slot + pos`. fp8 caches (`torch.float8_e4m3fn`) hold `value / scale` and are
dequantized on load with per-layer (scalar) or per-KV-head scales. Latent attention (MLA) has
one cache tensor `[num_slots, 1, kv_lora_rank + rope_dim]` and passes
`v_cache = k_cache[..., :kv_lora_rank]`: the values are the latent part of each key row.
"""
