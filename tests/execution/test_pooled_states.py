"""`StatePool` / `PooledStates`: a hybrid's recurrent states kept in the KV arena's blocks
the strategy names, each in its own dtype, zeros for a sequence that starts afresh."""

from __future__ import annotations

import pytest
import torch

from kvbench.core.kv_groups import KVGroup
from kvbench.execution.model_executor import KVArena
from kvbench.execution.pooled_states import StatePool
from kvbench.models.recurrent import RecurrentMixer

# conv state (2, 8 + 2 x 3) in bfloat16: 56 B; SSM state (2, 4, 3) in float32: 96 B; two
# recurrent layers: 304 B, over blocks of 4 slots x 64 B (one layer's bf16 K and V, 2 x 8)
MIXER = RecurrentMixer("mamba2", num_heads=2, head_dim=4, state_size=3, num_groups=1,
                       conv_kernel=3, inner_size=8, chunk_size=4, ssm_state_dtype="fp32")


def arena_and_pool(state_blocks: int = 2):
    arena = KVArena((KVGroup((1,), 2, 8, 2),), 64, torch.bfloat16, "cpu", state_layers=(0, 2))
    return arena, StatePool(arena.pool_tensors, 4, MIXER, (0, 2), torch.bfloat16, state_blocks)


def test_states_round_trip_through_their_blocks_in_their_dtypes():
    arena, pool = arena_and_pool()
    assert (pool.state_bytes, pool.block_bytes) == (304, 256)
    g = torch.Generator().manual_seed(0)
    # two sequences' first chunks (3 of 3 tokens, 5 of 5): zeros in, random states out
    step = pool.step([3, 5], [3, 5], [[3, 9], [4, 5]])
    written = {}
    for layer in (0, 2):
        conv, ssm = step.read(layer)
        assert conv.dtype == torch.bfloat16 and ssm.dtype == torch.float32
        assert conv.shape == (2, 2, 14) and ssm.shape == (2, 2, 4, 3)
        assert not conv.any() and not ssm.any()
        written[layer] = (torch.randn(conv.shape, generator=g).to(torch.bfloat16),
                          torch.randn(ssm.shape, generator=g))
        step.write(layer, written[layer])
    step.store()
    # the next step, the second sequence alone: its state comes back bit for bit
    later = pool.step([1], [6], [[4, 5]])
    for layer in (0, 2):
        for got, want in zip(later.read(layer), written[layer], strict=True):
            assert torch.equal(got[0], want[1])
    # a sequence computing from its first token (a recompute) starts from zeros, whatever
    # its blocks hold
    fresh = pool.step([6], [6], [[3, 9]])
    assert not any(t.any() for layer in (0, 2) for t in fresh.read(layer))
    # the bytes are the arena's: blocks no sequence named are untouched
    untouched = [b for b in range(16) if b not in (3, 9, 4, 5)]
    for tensor in arena.pool_tensors:
        assert not tensor.view(16, 4, -1)[untouched].any()


def test_a_write_of_the_wrong_dtype_or_shape_is_refused():
    _, pool = arena_and_pool()
    step = pool.step([2], [2], [[0, 1]])
    conv, ssm = step.read(0)
    with pytest.raises(ValueError, match="expected"):
        step.write(0, (conv, ssm.to(torch.bfloat16)))


def test_too_few_state_blocks_are_refused():
    with pytest.raises(ValueError, match="cannot hold"):
        arena_and_pool(state_blocks=1)


def test_what_was_read_stays_as_read_after_a_write():
    _, pool = arena_and_pool()
    step = pool.step([2], [2], [[0, 1]])
    conv, ssm = step.read(0)
    step.write(0, (torch.ones_like(conv), torch.ones_like(ssm)))
    assert not conv.any() and not ssm.any()
    assert all(t.eq(1).all() for t in step.read(0))
    _, pool = arena_and_pool()
    with pytest.raises(ValueError, match="hold 256 of"):
        pool.step([1], [4], [[0]])
