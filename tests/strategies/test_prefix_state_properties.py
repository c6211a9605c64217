"""Property tests of `prefix` holding a state-space hybrid's state: under the random admit /
step / fork / free sequences of `test_prefix_properties` (chunked prefill, preemption,
evictions when the small pool runs dry), in each `--mamba-cache-mode`, state blocks are never
lost or counted twice (each block free, held once per holder or evictable; the held ones are
the tables' and the states'), every sequence holds its state while it runs, a hit ends only
where a state checkpoint is cached (none in `none`), never beyond what the block layout
allows (the structural ceiling), and the pool is whole at the end."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.sequence import Sequence
from kvbench.strategies.prefix import PrefixCachingStrategy
from kvbench.strategies.prefix_index import extend_chain, state_hash
from tests.strategies.test_prefix_properties import Simulator, op_st


class StateSimulator(Simulator):
    def __init__(self, num_blocks: int, block_size: int, state_blocks: int, mode: str) -> None:
        super().__init__(num_blocks, block_size)
        self.cache = PrefixCachingStrategy(
            num_blocks * block_size + block_size - 1, 512, block_size=block_size, watermark=0.0,
            check_accounting=True, state_blocks=state_blocks, mamba_cache_mode=mode)
        # every state page name a checkpoint could take -> the prefix whose state it holds
        self.names: dict[bytes, tuple[int, ...]] = {}
        # block -> the prefix whose state its bytes hold, as the executor's copies leave them
        self.state_of: dict[int, tuple[int, ...]] = {}

    def _step_states(self, layout, scheduled) -> None:
        """The executor's part: the layout's state copies in order, then each sequence
        reads the state of the tokens it computed (`all`'s per-block pages: not checked,
        the engine refuses it) and leaves the state of the step's end in its blocks."""
        for src, dst in layout.state_copies:
            assert len(src) == len(dst) == self.cache.state_blocks
            for s, d in zip(src, dst, strict=True):
                self.state_of[d] = self.state_of.get(s)
        if self.cache.mamba_cache_mode == "all":
            return
        for (seq, n), blocks in zip(scheduled, layout.state_blocks, strict=True):
            if seq.num_computed:
                assert {self.state_of.get(b) for b in blocks} == \
                    {tuple(seq.token_ids[: seq.num_computed])}, "a state read wrong"
            for b in blocks:
                self.state_of[b] = tuple(seq.token_ids[: seq.num_computed + n])

    def _name_states(self) -> None:
        cache, bs = self.cache, self.cache.block_size
        for seq in self.live:
            tokens = seq.token_ids[: seq.num_computed]
            for i, h in enumerate(extend_chain([], cache._root, tokens, bs)):
                for k in range(cache.state_blocks):
                    self.names[state_hash(h, k)] = tuple(tokens[: (i + 1) * bs])

    def _run(self, scheduled, new_tokens) -> None:
        super()._run(scheduled, new_tokens)
        self._name_states()

    def free(self, seq: Sequence) -> None:
        self._name_states()
        super().free(seq)

    def _new_seq(self, tokens: list[int], output_len: int = 64) -> Sequence:
        seq = super()._new_seq(tokens, output_len)
        cache, chain = self.cache, self.cache._chain(seq)
        looked = (len(tokens) - 1) // cache.block_size
        self._before = (cache.hit_tokens, cache.ceiling_tokens, chain[:looked])
        return seq

    def admit(self, prompts: list[list[int]], sample: int, run: bool = True) -> None:
        cache = self.cache
        for tokens in prompts:  # one at a time, to see each hit
            hits_before = self.hits
            super().admit([tokens], sample, run)
            if self.hits == hits_before and cache.hit_tokens == self._before[0]:
                continue
            hit = self.hits - hits_before
            assert cache.mamba_cache_mode != "none", "a hit without any checkpoint"
            chain = self._before[2]
            assert cache._has_checkpoint(chain[hit // cache.block_size - 1])
            # never more than the block layout allows
            assert hit <= cache.ceiling_tokens - self._before[1]

    def fork(self, i: int, token: int) -> None:
        if not self.live:
            return
        parent = self.live[i % len(self.live)]
        if parent.num_uncomputed:
            return
        child = self._new_seq(parent.token_ids[: parent.num_computed] + [token])
        copies = self.cache.fork(parent, child)
        if copies is None:  # no room for the child's state
            return
        child.num_computed = parent.num_computed
        self.live.append(child)

    def split_by_block(self) -> tuple[int, int, int]:
        token, reserved, internal = super().split_by_block()
        return token, reserved, internal + self.cache._state_held * self.cache.block_size

    def check(self) -> None:
        # A named state page holds the state after the prefix its name says (the arena marks
        # its slots with that prefix): a checkpoint only of a prefix some sequence computed.
        cache, bs = self.cache, self.cache.block_size
        for block, h in cache.pool.hash_of.items():
            if h in self.names:
                self.arena[block * bs: (block + 1) * bs] = [self.names[h]] * bs
        super().check()
        assert set(cache.states) == set(cache.tables), "a running sequence without its state"
        s = cache.state_blocks
        for seq_id, pages in cache.states.items():
            if cache.mamba_cache_mode == "all":  # a state page for each block of the table
                assert len(pages) == s * (len(cache.tables[seq_id]) - cache._state_base[seq_id])
            else:
                assert len(pages) == s
        assert cache.pool.num_free + sum(1 for c in cache.pool.ref_counts if c) == \
            cache.pool.num_blocks, "a block is neither free nor held"


@pytest.mark.parametrize("mode", ["none", "align", "all"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(4, 14),
    block_size=st.sampled_from([1, 2, 4]),
    state_blocks=st.integers(1, 2),
    ops=st.lists(op_st, min_size=4, max_size=40),
)
def test_state_blocks_are_never_lost_nor_counted_twice(mode, num_blocks, block_size,
                                                       state_blocks, ops):
    sim = StateSimulator(num_blocks, block_size, state_blocks, mode)
    for op in ops:
        kind = op[0]
        if kind == "admit":
            sim.admit([list(p) for p in op[1]], op[2], run=op[3])
        elif kind == "step":
            sim.step(op[1], op[2], op[3])
        elif kind == "fork":
            sim.fork(op[1], op[2])
            sim.check()
            sim.step(op[1], [op[2]], 1000)
        elif kind == "free":
            sim.finish(op[1])
        sim.check()
    for seq in list(sim.live):
        sim.free(seq)
    sim.check()
    assert sim.cache.is_whole()
    assert not sim.cache.states and sim.cache._state_held == 0


@pytest.mark.parametrize("mode", ["align", "all"])
def test_the_random_model_reaches_state_hits(mode):
    """Guards against a vacuous property: a repeated prompt hits at a checkpoint."""
    sim = StateSimulator(num_blocks=12, block_size=2, state_blocks=1, mode=mode)
    sim.admit([[1, 2, 1, 2, 1]], 0)
    sim.step(0, [0], 1000)
    sim.finish(0)
    sim.admit([[1, 2, 1, 2, 1, 1]], 0)
    sim.check()
    assert sim.hits == 4 and sim.cache.state_checkpoints > 0
