"""`KVArena` allocates one K and one V tensor per layer, shaped by the layer's `KVGroup`."""

from __future__ import annotations

import pytest
import torch

from kvbench.core.kv_groups import KVGroup, kv_bytes_per_token
from kvbench.execution.model_executor import KVArena
from kvbench.models.presets import get_preset


def test_arena_bytes_are_slots_times_the_groups_bytes_per_token():
    groups = get_preset("tiny").kv_groups(2)
    arena = KVArena(groups, 32, torch.bfloat16, "cpu")
    assert len(arena.k) == len(arena.v) == groups[0].num_layers
    assert arena.k[0].shape == (32, *groups[0].slot_shape)
    assert arena.nbytes == 32 * kv_bytes_per_token(groups)


def test_each_layer_takes_its_groups_shape():
    groups = (KVGroup((0, 2), 2, 8, 4), KVGroup((1,), 4, 16, 4))
    arena = KVArena(groups, 5, torch.float32, "cpu")
    assert [tuple(k.shape) for k in arena.k] == [(5, 2, 8), (5, 4, 16), (5, 2, 8)]
    assert arena.nbytes == 5 * kv_bytes_per_token(groups)
    with pytest.raises(ValueError, match="cover layers"):
        KVArena((KVGroup((0, 2), 2, 8, 4),), 5, torch.float32, "cpu")


def test_state_layers_hold_no_kv():
    """A hybrid's recurrent layers (`state_layers`) get no K or V tensor; the others theirs."""
    arena = KVArena((KVGroup((1,), 2, 8, 4),), 5, torch.float32, "cpu", state_layers=(0, 2))
    assert [None if k is None else tuple(k.shape) for k in arena.k] == [None, (5, 2, 8), None]
    assert arena.v[0] is None and arena.nbytes == 5 * 2 * 2 * 8 * 4
    with pytest.raises(ValueError, match="cover layers"):
        KVArena((KVGroup((1,), 2, 8, 4),), 5, torch.float32, "cpu", state_layers=(1, 2))
