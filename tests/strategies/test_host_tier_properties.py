"""Property tests of the host tier (`--kv-offload`), over random schedules.

The tier alone: under random offers, store completions, loads and swaps (preempted
sequences' blocks pinned, then let go), every host block is in exactly one state (free,
storing, ready idle, loading, pinned), none is lost or counted twice, a pinned block is never
evicted, a private (partial-block) one is freed once let go, and the eviction policy's lists
hold exactly the idle ones (LRU and ARC).

`prefix` over it: driven as the engine drives it, with copies that end at random later
steps, on a fake arena whose slots hold the identity of the KV they store (the token prefix
they were computed from), and a host arena the copies move it to and from: every live
sequence reads back its own tokens' KV (host hits included, once their load has ended), every
host block holds the KV its key names, blocks in flight are never evicted or reused, and at
the end both tiers' books are whole. With preemption by swap, a swapped-out sequence's host
blocks keep its KV (the partial last block's too) until it is admitted again, and it then
reads back every token it had computed."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.host_transfers import HostTransfers
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies.host_tier import HostTier, swap_key
from kvbench.strategies.prefix import PrefixCachingStrategy
from tests.strategies.consistency import check_host_tier, check_pool, host_tier_idle

VOCAB = 3


# The tier alone ---------------------------------------------------------------------------

tier_op = st.one_of(
    st.tuples(st.just("offer"), st.lists(st.integers(0, 30), min_size=1, max_size=6)),
    st.tuples(st.just("stored"), st.integers(0, 100)),
    st.tuples(st.just("load"), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    st.tuples(st.just("loaded"), st.integers(0, 100)),
    st.tuples(st.just("swap"), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    st.tuples(st.just("unswap"), st.integers(0, 100)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.sampled_from(["lru", "arc"]), st.sampled_from([0, 2]),
       st.lists(tier_op, max_size=60))
def test_host_tier_books_stay_exact(num_blocks, policy, threshold, ops):
    tier = HostTier(num_blocks, policy, store_threshold=threshold)
    in_store: list[int] = []  # host blocks with a store in flight (in submission order)
    in_load: list[int] = []  # one entry per load in flight
    swaps: list[dict[bytes, int]] = []  # swapped-out sequences' pinned keys -> host blocks
    offered = stored = 0
    for op, arg in ops:
        if op == "offer":
            keys = [bytes([k]) for k in dict.fromkeys(arg)]
            before = dict(tier.block_of)
            taken = tier.offer(keys)
            for key, block in zip(keys, taken, strict=True):
                if block is not None:
                    assert key not in before and tier.block_of[key] == block
                    in_store.append(block)
                    offered += 1
                else:
                    assert key in before or tier.block_of.get(key) is None
            # a held key an offer names is never the one it evicts
            assert all(tier.block_of.get(k) == before[k] for k in keys if k in before)
        elif op == "stored" and in_store:
            done = in_store[: arg % (len(in_store) + 1)]
            del in_store[: len(done)]
            tier.stored(done)
            stored += len(done)
        elif op == "load":
            blocks = tier.lookup([bytes([k]) for k in arg])
            tier.begin_load(blocks)
            in_load.extend(blocks)
        elif op == "loaded" and in_load:
            k = arg % (len(in_load) + 1)
            tier.loaded(in_load[:k])
            del in_load[:k]
        elif op == "swap":  # a preempted sequence's full blocks, and a partial one
            keys = [bytes([k]) for k in dict.fromkeys(arg)]
            if arg[0] % 2:
                keys.append(swap_key(len(swaps)))
            before = dict(tier.block_of)
            taken = tier.swap_out(keys)
            if taken is None:
                assert tier.block_of == before  # refused: nothing changed
            else:
                for key, block in zip(keys, taken, strict=True):
                    assert (block is None) == (key in before)
                    if block is not None:
                        in_store.append(block)
                        offered += 1
                swaps.append({k: tier.block_of[k] for k in keys})
        elif op == "unswap" and swaps:  # admitted again: its blocks still ready are loaded
            held = swaps.pop(arg % len(swaps))
            ready = [b for b in held.values() if b not in tier.storing]
            if arg % 3:
                tier.begin_load(ready)
                in_load.extend(ready)
            tier.unpin(held.values())
        check_host_tier(tier)
        for held in swaps:  # pinned: never evicted
            assert all(tier.block_of.get(k) == b for k, b in held.items())
        private = {b for held in swaps for k, b in held.items() if len(k) == 12}
        busy = set(in_load) | set(in_store)  # let go, freed when its copy ends
        assert tier.private == private | (tier.private & busy), "a private block leaks"
        assert len(tier.storing) == len(set(in_store)) == len(in_store)
        assert tier.num_free + len(tier.block_of) == num_blocks
        assert set(tier.readers) == set(in_load)
        assert all(tier.readers[b] == in_load.count(b) for b in tier.readers)
    assert tier.stored_blocks == stored and offered - stored == len(in_store)


# prefix over the tier ---------------------------------------------------------------------


class Driver:
    """The engine's part: admissions, steps (sequences that wait for a load sit out),
    frees, and an executor whose copies end at random later steps. A store reads the arena
    when its step starts (before the step's writes); a load writes the arena when it ends."""

    def __init__(self, num_blocks: int, host_blocks: int, block_size: int, policy: str,
                 rng: random.Random, swap: bool = False) -> None:
        self.cache = PrefixCachingStrategy(
            num_blocks * block_size, 512, block_size=block_size, watermark=0.0,
            check_accounting=True, kv_offload_blocks=host_blocks, kv_offload_policy=policy)
        self.host = self.cache.host_tier
        self.bs = block_size
        self.arena: list[tuple[int, ...] | None] = [None] * (num_blocks * block_size)
        self.host_arena: list[list[tuple[int, ...] | None]] = [[None] * block_size
                                                               for _ in range(host_blocks)]
        self.jobs: dict[int, list[tuple[int, int]]] = {}  # load job -> (gpu, host) to land
        self.in_flight: list[int] = []
        self.live: list[Sequence] = []
        # Preemption by swap: the victims swapped out, each with the tokens it had computed
        self.swap = swap
        self.swapped: list[tuple[Sequence, int]] = []
        self.rng = rng
        self.next_id = 0
        self.prefix_of: dict[bytes, tuple[int, ...]] = {}  # key -> the tokens it names

    def _new_seq(self, tokens: list[int]) -> Sequence:
        request = Request(self.next_id, 0.0, tuple(tokens), 64)
        seq = Sequence(self.next_id, request, 0, list(tokens))
        self.next_id += 1
        return seq

    def _transfer(self, transfers: HostTransfers | None) -> None:
        """The step's copies (from its layout, or taken for a step that computes nothing)."""
        if transfers is None:
            return
        bs = self.bs
        for _, gpu, host in transfers.stores:
            self.host_arena[host] = self.arena[gpu * bs : (gpu + 1) * bs]
        if transfers.loads:
            self.jobs[transfers.load_job] = [(g, h) for _, g, h in transfers.loads]
        self.in_flight.extend(transfers.jobs)

    def _end_jobs(self, everything: bool = False) -> None:
        if everything:
            done = self.in_flight
        else:
            done = [j for j in self.in_flight if self.rng.random() < 0.5]
        self.in_flight = [j for j in self.in_flight if j not in done]
        bs = self.bs
        for job in done:
            for gpu, host in self.jobs.pop(job, ()):
                self.arena[gpu * bs : (gpu + 1) * bs] = self.host_arena[host]
        self.cache.host_jobs_done(done)

    def _run(self, scheduled: list[tuple[Sequence, int]], token: int) -> None:
        layout = self.cache.build_layout(scheduled)
        self._transfer(layout.host_transfers)
        bs = self.bs
        for seq, n in scheduled:
            table = self.cache.tables[seq.seq_id]
            for pos in range(seq.num_computed, seq.num_computed + n):
                self.arena[table[pos // bs] * bs + pos % bs] = tuple(seq.token_ids[: pos + 1])
        del layout
        for seq, n in scheduled:
            self._check_reads(seq, seq.num_computed + n)
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)
        self._end_jobs()

    def _waits(self, seq: Sequence) -> bool:
        return seq.seq_id in self.host.loading

    def admit(self, prompts: list[list[int]], token: int) -> None:
        scheduled = []
        for tokens in prompts:
            seq = self._new_seq(tokens)
            if not self.cache.can_admit(seq, len(self.live)):
                break
            cached = self.cache.admit(seq)
            assert cached % self.bs == 0 and cached < len(tokens)
            seq.num_computed += cached
            self.live.append(seq)
            if not self._waits(seq):
                scheduled.append((seq, seq.num_uncomputed))
        if scheduled and not any(s.num_uncomputed > 1 for s in self.live
                                 if all(s is not x for x, _ in scheduled)
                                 and not self._waits(s)):
            self._run(scheduled, token)
        else:
            self._idle()

    def _idle(self) -> None:
        self._transfer(self.host.take())
        self._end_jobs()

    def step(self, token: int, budget: int) -> None:
        pending = [s for s in self.live if not self._waits(s)]
        scheduled = []
        while pending and budget > 0:
            seq = pending.pop(0)
            n = min(seq.num_uncomputed, budget)
            while not self.cache.allocate(seq, n):
                victim = pending.pop() if pending else seq
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
        if scheduled:
            self._run(scheduled, token)
        else:
            self._idle()

    def free(self, seq: Sequence) -> None:
        self.cache.free(seq)
        self.live.remove(seq)

    def preempt(self, seq: Sequence) -> None:
        """Recompute, or with `swap` its KV to the host tier where it fits."""
        computed = seq.num_computed
        # (one that could not run alone could never come back: an engine refuses its request)
        fits = self.cache.blocks_for(len(seq.token_ids) + 1) <= self.cache.pool.num_blocks
        if not (self.swap and fits and self.cache.swap_out(seq)):
            self.free(seq)
            return
        assert seq.seq_id not in self.cache.tables
        self.live.remove(seq)
        seq.num_computed = 0
        self.swapped.append((seq, computed))

    def swap_in(self, i: int) -> None:
        """A swapped-out sequence admitted again: it resumes with every token it had
        computed (once its loads end: it waits meanwhile)."""
        if not self.swapped:
            return
        seq, computed = self.swapped[i % len(self.swapped)]
        if not self.cache.can_admit(seq, len(self.live)):
            return
        self.swapped.remove((seq, computed))
        cached = self.cache.admit(seq)
        assert cached >= computed, "a swapped-out sequence lost tokens it had computed"
        seq.num_computed += cached
        self.live.append(seq)

    def finish(self, i: int) -> None:
        done = [s for s in self.live if not self._waits(s) and s.num_uncomputed <= 1]
        if done:
            self.free(done[i % len(done)])

    def _check_reads(self, seq: Sequence, length: int) -> None:
        bs = self.bs
        table = self.cache.tables[seq.seq_id]
        for pos in range(length):
            assert self.arena[table[pos // bs] * bs + pos % bs] == tuple(
                seq.token_ids[: pos + 1]), f"sequence {seq.seq_id} reads wrong KV at {pos}"

    def _learn_keys(self) -> None:
        for seq in self.live:
            for i, h in enumerate(self.cache.hashes.get(seq.seq_id, ())):
                self.prefix_of.setdefault(h, tuple(seq.token_ids[: (i + 1) * self.bs]))

    def check(self) -> None:
        cache, tier, bs = self.cache, self.host.tier, self.bs
        check_pool(cache.pool)
        check_host_tier(tier)
        owners = [0] * cache.pool.num_blocks
        for table in cache.tables.values():
            for block in table:
                owners[block] += 1
        for blocks in self.host.pinned.values():
            for block in blocks:
                owners[block] += 1
        assert owners == cache.pool.ref_counts, "references differ from tables and pins"
        self._learn_keys()
        for seq in self.live:
            if not self._waits(seq):
                self._check_reads(seq, seq.num_computed)
        for block, h in cache.pool.hash_of.items():  # a named GPU block holds its prefix
            content = self.arena[block * bs : (block + 1) * bs]
            if h in self.prefix_of:
                assert content[-1] == self.prefix_of[h]
        for key, block in tier.block_of.items():  # a ready host block holds what it names
            if key in self.prefix_of and block not in tier.storing:
                assert self.host_arena[block][-1] == self.prefix_of[key], "host block content"
        # loads in flight read only ready blocks, and every waiting sequence has its job
        assert set(self.host.loading) <= {s.seq_id for s in self.live}
        for seq, computed in self.swapped:  # its pinned host blocks hold its KV
            swap = self.host.swaps[seq.seq_id]
            assert swap.tokens == computed
            for i, block in enumerate(swap.blocks):
                assert block in tier.pins and block in tier.key_of, "a pinned block evicted"
                if block in tier.storing:
                    continue
                for j in range(min(bs, computed - i * bs)):
                    assert self.host_arena[block][j] == tuple(seq.token_ids[: i * bs + j + 1])
        split = cache.memory_split(self.live, None)
        assert split.total == cache.num_slots

    def drain(self) -> None:
        for seq in list(self.live):
            self.free(seq)
        self._transfer(self.host.take())
        self._end_jobs(everything=True)
        while self.swapped:  # each alone: it fits, and reads back what it had computed
            self.swap_in(0)
            self._idle()
            self._end_jobs(everything=True)
            seq = self.live[0]
            assert not self._waits(seq)
            self._check_reads(seq, seq.num_computed)
            self.free(seq)
        assert self.cache.is_whole()
        assert host_tier_idle(self.host.tier) or self.in_flight == []


PREFIXES = ([], [0, 1, 2, 0, 1, 2, 0, 1], [2, 2, 1, 1, 0, 0, 1, 2])
tokens_st = st.builds(lambda prefix, tail: list(prefix) + tail, st.sampled_from(PREFIXES),
                      st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8))
op_st = st.one_of(
    st.tuples(st.just("admit"), st.lists(tokens_st, min_size=1, max_size=3),
              st.integers(0, VOCAB - 1)),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([3, 8, 1000])),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([3, 8, 1000])),
    st.tuples(st.just("finish"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("preempt"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("swap_in"), st.integers(0, 20), st.just(0)),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(3, 10), st.integers(1, 12), st.sampled_from([2, 4]),
       st.sampled_from(["lru", "arc"]), st.booleans(), st.integers(0, 2**16),
       st.lists(op_st, max_size=40))
def test_prefix_over_a_host_tier_keeps_exact_books(num_blocks, host_blocks, block_size,
                                                   policy, swap, seed, ops):
    driver = Driver(num_blocks, host_blocks, block_size, policy, random.Random(seed), swap)
    for op, a, b in ops:
        if op == "admit":
            driver.admit(a, b)
        elif op == "step":
            driver.step(a, b)
        elif op == "finish":
            driver.finish(a)
        elif op == "swap_in":
            driver.swap_in(a)
        elif driver.live:  # preempted (recompute or swap), waiting for a load or not
            driver.preempt(driver.live[a % len(driver.live)])
        driver.check()
    driver.drain()


swap_op_st = st.one_of(
    op_st,
    st.tuples(st.just("preempt"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("swap_in"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("swap_in"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([3, 1000])),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(3, 10), st.integers(4, 24), st.sampled_from([2, 4]),
       st.sampled_from(["lru", "arc"]), st.integers(0, 2**16), st.lists(swap_op_st, max_size=50))
def test_swapped_out_sequences_come_back_whole(num_blocks, host_blocks, block_size, policy,
                                               seed, ops):
    """Preemption by swap, often: the same books, and every swapped-out sequence's host
    blocks keep its KV while it waits and give it back at its re-admission."""
    test_prefix_over_a_host_tier_keeps_exact_books.hypothesis.inner_test(
        num_blocks, host_blocks, block_size, policy, True, seed, ops)


def test_a_prompt_evicted_from_the_gpu_comes_back_from_the_host_tier():
    """One conversation's history leaves the GPU cache for other traffic and returns: its
    blocks are loaded from the host tier (the sequence waits, then computes only the rest)."""
    driver = Driver(num_blocks=6, host_blocks=16, block_size=2, policy="lru",
                    rng=random.Random(0))
    history = [0, 1, 2, 0, 1, 2, 0, 1]
    driver.admit([history + [2]], 0)
    while driver.live:
        driver.step(0, 1000)
        driver.finish(0)
        driver.check()
    for other in ([2, 2, 2, 2, 1, 1, 1, 1, 0], [1, 0, 1, 0, 1, 0, 1, 0, 2]):  # evict it
        driver.admit([other], 0)
        while driver.live:
            driver.step(0, 1000)
            driver.finish(0)
    driver._end_jobs(everything=True)
    assert driver.cache.pool.lookup(driver.cache._chain(driver._new_seq(history))[0]) is None
    driver.admit([history + [1, 1]], 0)
    seq = driver.live[0]
    assert seq.num_computed == len(history) and driver._waits(seq)
    assert driver.host.hit_tokens == len(history)
    driver._idle()
    driver._end_jobs(everything=True)
    assert not driver._waits(seq)
    driver.step(0, 1000)
    driver.check()
    driver.drain()


def test_a_swap_out_keeps_the_residency_books():
    """A swap-out's stores allocate host blocks and its evictions end prefix blocks' lives,
    as an offer's do: the evicted block's lifetime and idle time are recorded, and a swapped
    block's later eviction is timed from the swap, not from the content it replaced."""
    now = [0.0]
    tier = HostTier(1, "lru")
    tier.residency.clock = lambda: now[0]
    [block] = tier.offer([b"a"])
    tier.stored([block])
    now[0] = 3.0
    assert tier.swap_out([b"s"]) == [block]  # evicts the idle prefix block "a"
    assert list(tier.residency.lifetimes_s) == [3.0]
    assert list(tier.residency.idle_s) == [3.0]
    tier.stored([block])
    now[0] = 4.0
    tier.begin_load([block])  # the swap-in: its first access makes no reuse gap
    assert list(tier.residency.reuse_gaps_s) == []
    tier.loaded([block])
    tier.unpin([block])
    now[0] = 10.0
    assert tier.offer([b"b"]) == [block]  # evicts the swapped block, allocated at 3 s
    assert list(tier.residency.lifetimes_s) == [3.0, 7.0]
    assert list(tier.residency.idle_s) == [3.0, 6.0]
