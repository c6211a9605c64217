"""Shared pieces of the batching tests: one tiny model, engines on it, references, invariants.

The tiny preset's default random weights (std 0.02) give nearly flat logits: the gap between
the best and second-best token is under 1e-4 at about 0.2% of positions, close enough to
float32 rounding that a batched and an unbatched run could in principle pick different
tokens at a near-tie. The tests therefore use the same preset with std 0.1 weights (logit
std 1.6, smallest top-2 gap seen ~1e-3), put in `build_engine`'s model cache under the key
it looks up, so every engine of these tests reuses one model that greedy decoding cannot
flip on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.engine.engine import Engine
from kvbench.models.loader import load_model
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.paged import PagedStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy
from tests.strategies.consistency import check_consistency

WIDE_INIT_STD = 0.1
MODEL = "tiny"
TINY_BYTES_PER_SLOT = 2048  # fp32: 2 (K, V) x 4 layers x 2 KV heads x 32 dims x 4 bytes
MODEL_CACHE: dict = {}


def model_cache() -> dict:
    """`build_engine`'s model cache holding the wide-init tiny model (loaded once)."""
    key = (MODEL, "float32", "cpu", 0)
    if key not in MODEL_CACHE:
        MODEL_CACHE[key] = load_model(MODEL, init_std=WIDE_INIT_STD)
    return MODEL_CACHE


def make_engine(**options) -> Engine:
    """An engine on the shared tiny model (CPU, fp32); `options` are `EngineConfig` fields."""
    options.setdefault("device", "cpu")
    return build_engine(EngineConfig(model=MODEL, **options), model_cache=model_cache()).engine


def request(request_id: int, prompt: Iterable[int], output_len: int, n: int = 1,
            arrival_s: float = 0.0) -> Request:
    return Request(request_id=request_id, arrival_s=arrival_s,
                   prompt_token_ids=tuple(prompt), output_len=output_len, n=n)


def prompt_of(seed: int, length: int, vocab: int = 2048) -> list[int]:
    return [(seed * 7919 + i * 104729 + (seed * i) % 13) % vocab for i in range(length)]


class Reference:
    """Greedy tokens of each prompt run alone (nothing else in the engine), fp32, huge budget.

    Greedy output of length k is the first k tokens of the output of any longer run, so one
    run per prompt (at the longest length asked so far) serves every request for it.
    """

    def __init__(self, max_model_len: int = 256) -> None:
        self.engine = make_engine(kv_memory="4MiB", max_model_len=max_model_len)
        self._tokens: dict[tuple[int, ...], list[int]] = {}
        self._ids = 0

    def tokens(self, prompt: Iterable[int], output_len: int) -> list[int]:
        prompt = tuple(prompt)
        known = self._tokens.get(prompt, [])
        if len(known) < output_len:
            self._ids += 1
            engine = self.engine
            engine.add_request(request(self._ids, prompt, output_len))
            engine.run_to_completion()
            known = engine.sequences[self._ids][0].token_ids[len(prompt):]
            engine.reset_stats()
            assert engine.strategy.is_whole()
            self._tokens[prompt] = known
        return known[:output_len]


@functools.cache
def shared_reference(max_model_len: int = 64) -> Reference:
    """One `Reference` per `max_model_len`, built on first use (not at import)."""
    return Reference(max_model_len=max_model_len)


def generated(engine: Engine, request_id: int) -> list[list[int]]:
    """Output tokens of every sample of a request."""
    return [s.token_ids[s.prompt_len:] for s in engine.sequences[request_id]]


# Invariants ---------------------------------------------------------------------------------


def check_invariants(engine: Engine) -> None:
    """Ownership and accounting invariants of the engine's cache after a step."""
    strategy = engine.strategy
    holders = engine.policy.holders()
    holder_ids = [s.seq_id for s in holders]
    assert len(set(holder_ids)) == len(holder_ids), "a sequence is listed twice"
    for seq in engine.waiting:
        assert seq.num_computed == 0, f"waiting sequence {seq.seq_id} keeps computed tokens"
    if isinstance(strategy, PrefixCachingStrategy):
        check_consistency(strategy)  # prefix caching: shares blocks by design
        assert set(strategy.tables) == set(holder_ids)
        assert min(strategy.pool.ref_counts, default=0) >= 0
    elif isinstance(strategy, PagedStrategy):
        _check_paged(strategy, holders)
    elif isinstance(strategy, ContiguousStrategy):
        _check_contiguous(strategy, holders)
    split = strategy.memory_split(holders, engine.waiting.head())
    assert split.total == strategy.num_slots
    assert min(split.token, split.reserved, split.internal, split.external, split.free) >= 0


def _check_paged(strategy: PagedStrategy, holders: list[Sequence]) -> None:
    pool = strategy.pool
    assert set(strategy.tables) == {s.seq_id for s in holders}, "tables differ from holders"
    owned = [b for table in strategy.tables.values() for b in table]
    assert len(owned) == len(set(owned)), "a block is owned by two live sequences"
    assert min(pool.ref_counts, default=0) >= 0, "a reference count went negative"
    owned_set = set(owned)
    if pool.counts_references:  # (kept where the books are checked: KVBENCH_CHECK_ACCOUNTING)
        for block, count in enumerate(pool.ref_counts):
            assert count == (1 if block in owned_set else 0), f"block {block} has count {count}"
    assert pool.num_free == pool.num_blocks - len(owned)
    assert not owned_set & set(pool.free_blocks()), "a block is both owned and free"
    bs = strategy.block_size
    for seq in holders:
        table = strategy.tables[seq.seq_id]
        # covers what is computed; never more than the tokens that exist (+ the block tail)
        assert -(-seq.num_computed // bs) <= len(table) <= -(-len(seq.token_ids) // bs)


def _check_contiguous(strategy: ContiguousStrategy, holders: list[Sequence]) -> None:
    assert set(strategy.group_ranges) == {s.seq_id for s in holders}
    spans = sorted([r for (r,) in strategy.group_ranges.values()] + strategy.ranges.holes)
    position = 0
    for start, length in spans:  # held ranges and holes tile the arena exactly
        assert start == position and length > 0, f"overlap or gap at slot {start}"
        position += length
    assert position == strategy.num_slots
    for seq in holders:
        [(_, length)] = strategy.group_ranges[seq.seq_id]
        assert length == strategy.reservation(seq) >= seq.final_kv_len >= seq.num_computed


# Driving ------------------------------------------------------------------------------------


def drive(
    engine: Engine,
    arrivals: list[tuple[int, Request]] | None = None,
    check: Callable[[Engine], None] | None = check_invariants,
    max_steps: int = 20_000,
) -> None:
    """Step the engine to completion, adding `(step, request)` arrivals when their step comes,
    checking `check` after every step; then drain and require the pool to be whole."""
    pending = sorted(arrivals or [], key=lambda a: a[0])
    step = 0
    while pending or engine.has_unfinished():
        while pending and (pending[0][0] <= step or not engine.has_unfinished()):
            engine.add_request(pending.pop(0)[1])
        engine.step()
        if check is not None:
            check(engine)
        step += 1
        assert step < max_steps, "no progress"
    engine.drain()
    assert engine.strategy.is_whole(), "the pool is not whole at the end"


class PreemptionOrder:
    """A `drive` check: the sequences a step preempts are the most recently admitted ones.

    The running set before the step (the set after the previous one, in admission order):
    whatever a step preempts must be its last k sequences. Also runs `check_invariants`.
    """

    def __init__(self, invariants: bool = True) -> None:
        self.invariants = invariants
        self.before: list = []
        self.num_steps = 0
        self.carried = 0  # preemptions of steps without a row, not yet in a record
        self.counts: dict[int, int] = {}
        self.victims: list[list] = []  # per step: the preempted sequences, in order

    def __call__(self, engine: Engine) -> None:
        if self.invariants:
            check_invariants(engine)
        preempted = [
            s for s in self.before if s.preemptions > self.counts.get(s.seq_id, 0)
        ]
        if preempted:
            tail = self.before[len(self.before) - len(preempted):]
            assert {s.seq_id for s in preempted} == {s.seq_id for s in tail}, (
                f"preempted {[s.seq_id for s in preempted]}, most recent "
                f"{[s.seq_id for s in tail]}"
            )
        # A step that ran nothing has no row: its preemptions go in the next one's.
        if len(engine.steps) > self.num_steps:
            recorded = engine.steps[-1].preemptions
            assert len(preempted) + self.carried == recorded, (
                "preemptions of the step not in its record")
            self.carried = 0
        else:
            self.carried += len(preempted)
        self.num_steps = len(engine.steps)
        self.victims.append(preempted)
        self.before = list(engine.policy.running)
        self.counts = {
            s.seq_id: s.preemptions for group in engine.sequences.values() for s in group
        }


@dataclass
class Snapshot:
    running: list[int]
    finished_members: list[int]
    waiting: list[int]
    holding: set[int]  # request ids whose sequences hold KV memory
    record: object


def run_recorded(engine, arrivals) -> list[Snapshot]:
    """Drive to completion; one snapshot of the policy and cache after every step."""
    snaps: list[Snapshot] = []
    order = PreemptionOrder()

    def check(e) -> None:
        order(e)
        strategy = e.strategy
        held = set(getattr(strategy, "tables", None) or getattr(strategy, "group_ranges", {}))
        by_seq = {s.seq_id: s.request.request_id for g in e.sequences.values() for s in g}
        snaps.append(Snapshot(
            running=[s.request.request_id for s in e.policy.running],
            finished_members=[s.request.request_id
                              for s in getattr(e.policy, "finished_members", [])],
            waiting=[s.request.request_id for s in e.waiting],
            holding={by_seq[i] for i in held},
            record=e.steps[-1],
        ))

    drive(engine, arrivals, check=check)
    return snaps
