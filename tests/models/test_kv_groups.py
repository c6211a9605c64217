"""`KVGroup` and `ModelConfig.kv_groups`: KV bytes per token, one GPU's share under TP."""

from __future__ import annotations

import pytest

from kvbench.core.kv_groups import KVGroup, full_attention_group, kv_bytes_per_token
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset


def test_gqa_model_is_one_full_attention_group():
    model = get_preset("llama-3-8b")  # 32 layers, 32 query heads over 8 KV heads, head dim 128
    (group,) = model.kv_groups(2)
    assert group.attention == "full" and group.window is None
    assert group.layers == tuple(range(32)) and group.num_layers == 32
    assert group.slot_shape == (8, 128)  # KV heads, not query heads
    assert group.bytes_per_layer_token == 2 * 8 * 128 * 2 == 4096
    assert group.bytes_per_token == 32 * 4096 == 131_072
    assert kv_bytes_per_token(model.kv_groups(2)) == model.kv_bytes_per_token(2) == 131_072
    assert kv_bytes_per_token(model.kv_groups(1)) == 65_536  # fp8


def test_tensor_parallel_splits_the_kv_heads():
    model = get_preset("llama-3-8b")
    (half,) = model.kv_groups(2, tensor_parallel_size=2)
    assert half.slot_shape == (4, 128) and half.bytes_per_token == 65_536
    assert kv_bytes_per_token(model.kv_groups(2, 8)) == 131_072 // 8 == 16_384
    with pytest.raises(KvbenchInputError, match="does not divide"):
        model.kv_groups(2, tensor_parallel_size=3)
    with pytest.raises(KvbenchInputError, match="must be >= 1"):
        model.check_tensor_parallel(0)


def test_groups_sum_and_unknown_kinds_are_refused():
    a = full_attention_group(2, 4, 64, 2)
    b = KVGroup((2, 3, 4), 2, 64, 2)
    assert kv_bytes_per_token((a, b)) == 2 * 2 * 4 * 64 * 2 + 3 * 2 * 2 * 64 * 2
    assert a.formula() == "2 (K,V) x 2 layers x 4 KV heads x 64 head dim x 2 B"
    with pytest.raises(ValueError, match="unknown KV group kind"):
        KVGroup((0,), 4, 64, 2, attention="linear")
    with pytest.raises(ValueError, match="needs a window"):
        KVGroup((0,), 4, 64, 2, attention="sliding")
    with pytest.raises(ValueError, match="no window"):
        KVGroup((0,), 4, 64, 2, window=128)
