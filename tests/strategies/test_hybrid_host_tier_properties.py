"""Property tests of `hybrid-prefix` over a host tier (`--kv-offload`), over random schedules.

The driver is the engine's part under vLLM v1's schedule: each step serves the running
sequences first (a sequence waiting for its load sits out, its budget going to others),
preempting the most recently admitted when memory runs out, then admits from the queue in
chunks with the budget left; finishes and preemptions come at random, host copies end at
random later steps, under LRU and ARC. Its arena is a pool of pages whose slots hold the
identity of the KV they store (the allocation group and the token prefix it was computed
from), and a host arena the copies move pages to and from. After every operation:

- every host block is in exactly one state (free, storing, ready idle, loading), the stores
  and loads in flight are exactly the tier's storing and loading blocks, and the tier's free
  and resident blocks add up to its size;
- every GPU block is free, evictable or held, its references are exactly the tables' entries
  and the pins of loads whose sequence left; the memory split covers the arena;
- every running sequence reads back its own tokens' KV in every group over what its next
  query reads (a window group: the window), host hits included once their load has ended;
  every named GPU block and every ready host block holds the KV its key names;
- at the end, with every sequence gone and every copy ended, both tiers' books are whole."""

from __future__ import annotations

import random
from collections import Counter, deque

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.host_transfers import HostTransfers
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies.hybrid import FREED
from kvbench.strategies.hybrid_prefix import HybridPrefixStrategy
from kvbench.strategies.prefix_index import extend_chain, root_hash
from tests.strategies.consistency import check_host_tier, check_pool, host_tier_idle

VOCAB = 3
MAX_LEN = 64
OUTPUT_LEN = 6


class HybridHostDriver:
    """Steps, admissions, frees and a host-copy executor over `hybrid-prefix` with a tier.
    A store reads its GPU page when its step starts (before the step's writes); a load
    writes its GPU page when its job ends."""

    def __init__(self, num_blocks: int, host_blocks: int, block_size: int,
                 windows: tuple[int | None, ...], policy: str, rng: random.Random) -> None:
        self.cache = HybridPrefixStrategy(
            num_blocks * block_size, MAX_LEN, block_size=block_size, watermark=0.0,
            allocation_windows=windows, max_num_batched_tokens=MAX_LEN, check_accounting=True,
            kv_offload_blocks=host_blocks, kv_offload_policy=policy)
        self.host = self.cache.host_tier
        self.bs = block_size
        self.windows = windows
        self.arena: list[tuple[int, tuple[int, ...]] | None] = [None] * (num_blocks * block_size)
        self.host_arena: list[list[tuple[int, tuple[int, ...]] | None]] = [
            [None] * block_size for _ in range(host_blocks)]
        self.store_jobs: dict[int, list[int]] = {}  # job -> host blocks it stores
        self.load_jobs: dict[int, list[tuple[int, int]]] = {}  # job -> (gpu, host) pages
        self.in_flight: list[int] = []
        self.running: list[Sequence] = []  # in admission order
        self.waiting: deque[Sequence] = deque()
        self.rng = rng
        self.next_id = 0
        self.freed_since_take = False  # stores decided that no job has taken yet
        self.content_of: dict[bytes, tuple[int, tuple[int, ...]]] = {}  # key -> what it names

    # Operations -------------------------------------------------------------------------

    def arrive(self, prompts: list[list[int]]) -> None:
        for tokens in prompts:
            request = Request(self.next_id, 0.0, tuple(tokens), OUTPUT_LEN)
            self.waiting.append(Sequence(self.next_id, request, 0, list(tokens)))
            self.next_id += 1

    def waits(self, seq: Sequence) -> bool:
        return seq.seq_id in self.host.loading

    def step(self, token: int, budget: int) -> None:
        scheduled: list[tuple[Sequence, int]] = []
        pending = deque(self.running)
        preempted = False
        while pending and budget > 0:
            seq = pending.popleft()
            if self.waits(seq):
                continue
            n = min(seq.num_uncomputed, budget)
            while not self.cache.allocate(seq, n):
                victim = pending.pop() if pending else seq
                self.preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
        while not preempted and self.waiting and budget > 0:
            seq = self.waiting[0]
            if not self.cache.can_admit(seq, len(self.running)):
                if not self.running:  # never fits: drop it
                    self.waiting.popleft()
                    continue
                break
            self.waiting.popleft()
            cached = self.cache.admit(seq, budget)
            assert cached % self.bs == 0 and cached < len(seq.token_ids)
            seq.num_computed += cached
            self.running.append(seq)
            self._learn(seq)
            if not self.waits(seq):
                n = min(seq.num_uncomputed, budget)
                scheduled.append((seq, n))
                budget -= n
        if scheduled:
            self._run(scheduled, token)
        else:
            self._transfer(self.host.take())
            self._end_jobs()

    def preempt(self, seq: Sequence) -> None:
        """Recompute: its memory goes back, it waits at the queue's front for a readmission."""
        self.freed_since_take = True
        self.cache.free(seq)
        self.running.remove(seq)
        seq.num_computed = 0
        self.waiting.appendleft(seq)

    def finish(self, i: int) -> None:
        done = [s for s in self.running if not self.waits(s) and s.num_uncomputed <= 1]
        if done:
            self._free(done[i % len(done)])

    def _free(self, seq: Sequence) -> None:
        self.freed_since_take = True
        self.cache.free(seq)
        self.running.remove(seq)

    # The executor -----------------------------------------------------------------------

    def _run(self, scheduled: list[tuple[Sequence, int]], token: int) -> None:
        layout = self.cache.build_layout(scheduled)
        self._transfer(layout.host_transfers)
        bs = self.bs
        for seq, n in scheduled:
            for g, table in enumerate(self.cache.tables[seq.seq_id]):
                for pos in range(seq.num_computed, seq.num_computed + n):
                    block = table[pos // bs]
                    assert block >= 0, f"sequence {seq.seq_id} writes {pos} without a block"
                    self.arena[block * bs + pos % bs] = (g, tuple(seq.token_ids[: pos + 1]))
        del layout
        for seq, n in scheduled:
            self._check_reads(seq, seq.num_computed, seq.num_computed + n)
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)
                self._learn(seq)
                if seq.is_finished:
                    self._free(seq)
        self._end_jobs()

    def _transfer(self, transfers: HostTransfers | None) -> None:
        """A step's copies (from its layout, or taken for a step that computes nothing)."""
        self.freed_since_take = False
        if transfers is None:
            return
        bs = self.bs
        for _, gpu, host in transfers.stores:
            self.host_arena[host] = self.arena[gpu * bs : (gpu + 1) * bs]
        if transfers.stores:
            self.store_jobs[transfers.store_job] = [h for _, _, h in transfers.stores]
        if transfers.loads:
            self.load_jobs[transfers.load_job] = [(g, h) for _, g, h in transfers.loads]
        self.in_flight.extend(transfers.jobs)

    def _end_jobs(self, everything: bool = False) -> None:
        done = [j for j in self.in_flight if everything or self.rng.random() < 0.5]
        self.in_flight = [j for j in self.in_flight if j not in done]
        bs = self.bs
        for job in done:
            self.store_jobs.pop(job, None)
            for gpu, host in self.load_jobs.pop(job, ()):
                self.arena[gpu * bs : (gpu + 1) * bs] = self.host_arena[host]
        for seq in self.cache.host_jobs_done(done):
            assert seq in self.running and not self.waits(seq)

    # Checks -----------------------------------------------------------------------------

    def _learn(self, seq: Sequence) -> None:
        """The content every key of the sequence's full blocks names, in every group."""
        chain = extend_chain([], root_hash(""), seq.token_ids, self.bs)
        for i, h in enumerate(chain):
            prefix = tuple(seq.token_ids[: (i + 1) * self.bs])
            for g in range(len(self.windows)):
                self.content_of.setdefault(h + bytes((g,)), (g, prefix))

    def _check_reads(self, seq: Sequence, query: int, end: int) -> None:
        """The KV the queries from position `query` read, up to `end`, is the sequence's own
        (a window group's from the window of `query` on)."""
        bs = self.bs
        for g, (window, table) in enumerate(zip(self.windows, self.cache.tables[seq.seq_id],
                                                strict=True)):
            start = 0 if window is None else max(0, query - window + 1)
            for pos in range(start, end):
                block = table[pos // bs]
                assert block != FREED, f"sequence {seq.seq_id} lost group {g}'s block at {pos}"
                assert self.arena[block * bs + pos % bs] == (
                    g, tuple(seq.token_ids[: pos + 1])), (
                    f"sequence {seq.seq_id} reads wrong KV in group {g} at {pos}")

    def check(self) -> None:
        cache, host, tier, bs = self.cache, self.host, self.host.tier, self.bs
        # the host tier: one state each, exactly the copies in flight, every block counted
        check_host_tier(tier)
        storing = [h for blocks in self.store_jobs.values() for h in blocks]
        assert len(set(storing)) == len(storing) and set(storing) <= tier.storing
        if not self.freed_since_take:  # (a free offers its blocks: the next job's)
            assert set(storing) == tier.storing
        loading = Counter(h for pages in self.load_jobs.values() for _, h in pages)
        assert loading == Counter(tier.readers), "loads in flight differ from the tier's"
        assert tier.num_free + len(tier.block_of) == tier.num_blocks  # free, storing or ready
        assert len(tier.readers) <= len(tier.block_of) - len(tier.storing)  # loading: ready
        # the GPU pool: one state each, references exactly the tables' and the pins'
        check_pool(cache.pool)
        owners = [0] * cache.pool.num_blocks
        for tables in cache.tables.values():
            for table in tables:
                for block in table:
                    assert block >= FREED, "a table entry is neither a block nor freed"
                    if block != FREED:
                        owners[block] += 1
        for blocks in host.pinned.values():
            for block in blocks:
                owners[block] += 1
        assert owners == cache.pool.ref_counts, "references differ from tables and pins"
        for pages in self.load_jobs.values():  # a page a load writes is never reused
            for gpu, _ in pages:
                assert cache.pool.ref_counts[gpu] > 0, f"GPU block {gpu} loads unheld"
        assert set(host.loading) == {s.seq_id for s in self.running if self.waits(s)}
        assert set(cache.tables) == {s.seq_id for s in self.running}
        split = cache.memory_split(self.running, self.waiting[0] if self.waiting else None)
        assert split.total == cache.num_slots
        # contents: what each running sequence reads, what each name holds
        for seq in self.running:
            if not self.waits(seq):
                self._check_reads(seq, seq.num_computed, seq.num_computed)
        for block, key in cache.pool.hash_of.items():
            assert self.arena[block * bs + bs - 1] == self.content_of[key], (
                f"GPU block {block} does not hold what its name says")
        for key, block in tier.block_of.items():
            if block not in tier.storing:
                assert self.host_arena[block][-1] == self.content_of[key], (
                    f"host block {block} does not hold what its key names")

    def drain(self) -> None:
        for seq in list(self.running):
            self._free(seq)
        self.waiting.clear()
        self._transfer(self.host.take())
        self._end_jobs(everything=True)
        self.check()
        assert self.cache.is_whole() and host_tier_idle(self.host.tier)
        assert self.cache.memory_split([], None).held == 0


PREFIXES = ([], [0, 1, 2, 0, 1, 2, 0, 1], [2, 2, 1, 1, 0, 0, 1, 2])
tokens_st = st.builds(lambda prefix, tail: list(prefix) + tail, st.sampled_from(PREFIXES),
                      st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8))
op_st = st.one_of(
    st.tuples(st.just("arrive"), st.lists(tokens_st, min_size=1, max_size=3), st.just(0)),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([1, 3, 8, MAX_LEN])),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([1, 3, 8, MAX_LEN])),
    st.tuples(st.just("step"), st.integers(0, VOCAB - 1), st.sampled_from([1, 3, 8, MAX_LEN])),
    st.tuples(st.just("finish"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("preempt"), st.integers(0, 20), st.just(0)),
)
windows_st = st.lists(st.one_of(st.none(), st.integers(1, 10)), min_size=1, max_size=3)


def run_schedule(driver: HybridHostDriver, ops) -> None:
    for op, a, b in ops:
        if op == "arrive":
            driver.arrive(a)
        elif op == "step":
            driver.step(a, b)
        elif op == "finish":
            driver.finish(a)
        elif driver.running:  # preempted (recompute), waiting for a load or not
            driver.preempt(driver.running[a % len(driver.running)])
        driver.check()
    driver.drain()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 12), st.integers(1, 32), st.sampled_from([2, 4]), windows_st,
       st.sampled_from(["lru", "arc"]), st.integers(0, 2**16), st.lists(op_st, min_size=20, max_size=60))
def test_hybrid_prefix_over_a_host_tier_keeps_exact_books(blocks_per_group, host_blocks, block_size,
                                                          windows, policy, seed, ops):
    driver = HybridHostDriver(blocks_per_group * len(windows), host_blocks, block_size, tuple(windows), policy,
                              random.Random(seed))
    run_schedule(driver, ops)


def test_a_history_evicted_from_the_gpu_comes_back_from_the_host_tier_in_every_group():
    """A conversation's history leaves the GPU cache for other traffic and returns: every
    group's blocks are loaded from the host tier (the sequence waits, then computes only the
    rest, reading its own KV in the full group and in the window)."""
    class CopiesEndWhenAsked(random.Random):
        def random(self) -> float:
            return 1.0

    driver = HybridHostDriver(num_blocks=12, host_blocks=64, block_size=2, windows=(None, 3),
                              policy="lru", rng=CopiesEndWhenAsked())
    history = [0, 1, 2, 0, 1, 2, 0, 1]

    def serve(prompt: list[int]) -> None:
        driver.arrive([prompt])
        while driver.running or driver.waiting:
            driver.step(0, MAX_LEN)
            driver.check()
            driver.finish(0)
        driver._end_jobs(everything=True)

    serve(history + [2])
    for other in ([2, 2, 2, 2, 1, 1, 1, 1, 0], [1, 0, 1, 0, 1, 0, 1, 0, 2]):  # evict it
        serve(other)
    loaded_before = driver.host.tier.loaded_blocks
    driver.arrive([history + [1, 1]])
    driver.step(0, MAX_LEN)
    seq = driver.running[0]
    assert seq.num_computed == len(history) and driver.waits(seq)
    assert driver.host.hit_tokens == len(history)
    driver.check()
    driver.step(0, MAX_LEN)  # it sits out until its load has ended
    driver._end_jobs(everything=True)
    assert not driver.waits(seq)
    assert driver.host.tier.loaded_blocks - loaded_before > len(history) // 2
    driver.step(0, MAX_LEN)
    driver.check()
    driver.drain()
