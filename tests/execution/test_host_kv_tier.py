"""`HostKVTier`: the arena's blocks copied to host memory and back, bit for bit, with books."""

from __future__ import annotations

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.host_transfers import HostTransfers
from kvbench.core.kv_allocation import hybrid_allocation
from kvbench.core.kv_groups import KVGroup
from kvbench.core.layout import HostCopy, KVLayout
from kvbench.core.step_batch import StepBatch
from kvbench.execution.host_kv_tier import HostKVTier, block_runs
from kvbench.execution.model_executor import KVArena

BLOCK = 4
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}


def _fill(arena: KVArena, seed: int = 0) -> None:
    """Random bytes in every tensor (every bit pattern, NaNs included, must survive)."""
    gen = torch.Generator().manual_seed(seed)
    for t in arena.pool_tensors:
        raw = t.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, generator=gen, dtype=torch.uint8))


def _block(arena: KVArena, block: int) -> list[torch.Tensor]:
    return [t[block * BLOCK:(block + 1) * BLOCK].view(torch.uint8).clone()
            for t in arena.pool_tensors]


def _arenas(dtype: torch.dtype):
    element = torch.empty((), dtype=dtype).element_size()
    # two KV groups of different shapes (a full and a window group)
    yield "groups", KVArena((KVGroup((0, 2), 2, 8, element),
                             KVGroup((1,), 4, 16, element, "sliding", 8)), 64, dtype, "cpu")
    # latent attention: one tensor a layer, V a view of it
    yield "mla", KVArena((KVGroup((0, 1, 2), 1, 24, element, "mla", value_dim=16),), 64, dtype,
                         "cpu")
    # hybrid's shared pool: group_size K and V tensors serve every allocation group
    groups = (KVGroup((0, 2, 4, 6), 2, 8, element), KVGroup((1, 3, 5), 2, 8, element,
                                                              "sliding", 8))
    yield "hybrid", KVArena(groups, 64, dtype, "cpu", allocation=hybrid_allocation(groups))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_blocks_round_trip_bit_exactly_for_every_arena_layout(dtype):
    for name, arena in _arenas(dtype):
        _fill(arena)
        tier = HostKVTier(arena.pool_tensors, 6, BLOCK)
        before = {b: _block(arena, b) for b in (1, 4, 7, 9)}
        tier.store([1, 4, 7, 9], [5, 0, 3, 1])
        _fill(arena, seed=1)  # the arena's blocks are overwritten
        tier.load([0, 5, 1, 3], [10, 11, 12, 13])
        for gpu, host_src in ((10, 4), (11, 1), (12, 9), (13, 7)):
            after = _block(arena, gpu)
            assert all(torch.equal(a, b) for a, b in zip(after, before[host_src], strict=True)), (
                name, gpu)


def test_a_block_moves_every_tensor_of_the_arena_and_nothing_else():
    arena = next(_arenas(torch.bfloat16))[1]
    _fill(arena)
    tier = HostKVTier(arena.pool_tensors, 4, BLOCK)
    assert tier.fragments_per_block == len(arena.pool_tensors) == 6  # K and V of 3 layers
    assert tier.block_bytes * tier.num_gpu_blocks == arena.nbytes
    untouched = [_block(arena, b) for b in range(16)]
    tier.store([2], [0])
    tier.load([0], [5])
    for b in range(16):
        expected = untouched[2] if b == 5 else untouched[b]
        assert all(torch.equal(x, y) for x, y in zip(_block(arena, b), expected, strict=True))


def test_the_books_count_blocks_bytes_and_time_per_step_and_in_total():
    arena = next(_arenas(torch.float16))[1]
    tier = HostKVTier(arena.pool_tensors, 8, BLOCK)
    tier.store([0, 1, 2], [0, 1, 2])
    tier.load([1], [7])
    step = tier.take_step_stats()
    assert (step.store_blocks, step.load_blocks) == (3, 1)
    assert (step.store_bytes, step.load_bytes) == (3 * tier.block_bytes, tier.block_bytes)
    assert step.store_s > 0 and step.load_s > 0
    tier.load([0, 2], [8, 9])
    second = tier.take_step_stats()
    assert (second.store_blocks, second.load_blocks, second.store_bytes) == (0, 2, 0)
    assert (tier.totals.store_blocks, tier.totals.load_blocks) == (3, 3)
    assert tier.totals.load_bytes == 3 * tier.block_bytes
    assert tier.take_step_stats().load_blocks == 0
    tier.store([], [])  # nothing to copy: no books
    assert tier.take_step_stats() == type(step)()


def test_bad_block_ids_are_refused_before_anything_is_copied():
    arena = next(_arenas(torch.bfloat16))[1]
    tier = HostKVTier(arena.pool_tensors, 4, BLOCK)
    with pytest.raises(IndexError, match="host block 4"):
        tier.store([0], [4])
    with pytest.raises(IndexError, match="arena block 16"):
        tier.load([0], [16])
    with pytest.raises(ValueError, match="2 source blocks for 1"):
        tier.store([0, 1], [0])
    with pytest.raises(ValueError, match="named twice"):
        tier.store([0, 1], [2, 2])
    with pytest.raises(ValueError, match="named twice"):
        tier.load([0, 1], [3, 3])
    assert tier.take_step_stats().store_blocks == 0


def test_block_runs_merge_pairs_consecutive_on_both_sides():
    assert block_runs([3, 4, 5, 9, 10], [0, 1, 7, 8, 2]) == [(3, 0, 2), (5, 7, 1), (9, 8, 1),
                                                              (10, 2, 1)]
    assert block_runs([], []) == []


def test_a_host_copy_pairs_blocks_and_names_its_direction():
    with pytest.raises(ValueError, match="store"):
        HostCopy("swap", (1,), (2,))
    with pytest.raises(ValueError, match="pairs"):
        HostCopy("load", (1, 2), (2,))


def _executor():
    built = build_engine(EngineConfig(model="tiny", strategy="paged", kv_memory="1MiB",
                                      max_model_len=64, block_size=BLOCK))
    return built.engine.executor


def _step(tables, query_lens, seq_lens, host_transfers=None):
    slots, positions, ids = [], [], []
    for table, q, s in zip(tables, query_lens, seq_lens, strict=True):
        for pos in range(s - q, s):
            positions.append(pos)
            slots.append(table[pos // BLOCK] * BLOCK + pos % BLOCK)
            ids.append(1 + pos % 7)
    layout = KVLayout(kind="paged", slot_mapping=slots, query_lens=list(query_lens),
                      seq_lens=list(seq_lens), block_size=BLOCK, block_tables=tables,
                      host_transfers=host_transfers)
    ends = [sum(query_lens[: i + 1]) - 1 for i in range(len(query_lens))]
    prefills = sum(1 for q in query_lens if q > 1)
    return StepBatch(input_ids=ids, positions=positions, layout=layout,
                     num_prefill_seqs=prefills, sample_rows=ends)


def test_the_model_executor_loads_a_stored_prefix_before_the_forward_reads_it():
    """A prefix stored to the host tier and loaded into other arena blocks decodes to the same
    logits, bit for bit, as the original blocks; without the load it does not."""
    executor = _executor()
    tier = HostKVTier(executor.arena.pool_tensors, 8, BLOCK)
    executor.attach_host_tier(tier)
    executor.execute(_step([[0, 1]], [8], [8]))  # prefill 8 tokens into blocks 0 and 1
    original = executor.execute(_step([[0, 1, 2]], [1], [9]))  # decode position 8
    assert executor.last_host_copies.store_blocks == 0
    executor.execute(_step([[0, 1, 2]], [1], [9], HostTransfers(stores=((0, 0, 3), (0, 1, 4)))))
    stored = executor.last_host_copies
    assert (stored.store_blocks, stored.store_bytes) == (2, 2 * tier.block_bytes)
    unloaded = executor.execute(_step([[5, 6, 7]], [1], [9]))
    loaded = executor.execute(_step([[5, 6, 7]], [1], [9], HostTransfers(loads=((0, 5, 3), (0, 6, 4)))))
    assert executor.last_host_copies.load_blocks == 2
    assert torch.equal(loaded, original)
    assert not torch.equal(unloaded, original)
    assert tier.totals.store_blocks == tier.totals.load_blocks == 2


def test_a_layout_with_host_copies_needs_a_tier():
    executor = _executor()
    with pytest.raises(RuntimeError, match="attach_host_tier"):
        executor.execute(_step([[0, 1]], [8], [8], HostTransfers(stores=((0, 0, 0),))))
