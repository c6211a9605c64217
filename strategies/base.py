"""The `CacheStrategy` seam: KV allocation bookkeeping, never tensors."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from kvbench.core.layout import DROP_TABLE, KVLayout, SlotCopy, TableOp
from kvbench.core.sequence import Sequence
from kvbench.strategies.residency_books import ResidencyBooks


@dataclass
class MemorySplit:
    """The arena's slots split as in docs/design.md (Memory split); the first five add up to the arena.

    `cached` is the part of `free` that holds evictable prefix-cache blocks. `groups` holds
    each allocation group's part where a strategy keeps one table per group (`hybrid`: free
    slots are the shared pool's, in the total only); empty where one table serves every layer.
    """

    token: int = 0
    reserved: int = 0
    internal: int = 0
    external: int = 0
    free: int = 0
    cached: int = 0
    prompt_blocks: int | None = None  # distinct blocks holding prompt positions (block strategies)
    groups: tuple[MemorySplit, ...] = ()
    # Computed tokens of the sequences holding memory, where `token` counts a token once per
    # group (`hybrid`); None: `token` is that count.
    sequence_tokens: int | None = None

    @property
    def total(self) -> int:
        return self.token + self.reserved + self.internal + self.external + self.free

    @property
    def held(self) -> int:
        return self.token + self.reserved + self.internal + self.external

    @property
    def utilization(self) -> float | None:
        return self.token / self.held if self.held else None

    def add_held(self, held: int, token: int, final_kv_len: int) -> None:
        """Add `held` slots of a sequence with `token` computed that will hold `final_kv_len`:
        token slots, the rest it will use (reserved), the rest never (internal)."""
        token, reserved, internal = split_held(held, token, final_kv_len)
        self.token += token
        self.reserved += reserved
        self.internal += internal

    @classmethod
    def of_groups(cls, groups: tuple[MemorySplit, ...], num_slots: int, computed: int,
                  external: int = 0) -> MemorySplit:
        """The whole split of per-group splits; `computed`: the holders' computed tokens."""
        prompts = [g.prompt_blocks for g in groups]
        split = cls(token=sum(g.token for g in groups), reserved=sum(g.reserved for g in groups),
                    internal=sum(g.internal for g in groups), external=external,
                    prompt_blocks=None if None in prompts else sum(prompts), groups=groups,
                    sequence_tokens=computed)
        split.free = num_slots - split.held
        return split


# Set to 1 to recompute every memory split from scratch and assert it equals the running totals.
CHECK_ACCOUNTING_ENV = "KVBENCH_CHECK_ACCOUNTING"


def split_held(held: int, token: int, final_kv_len: int) -> tuple[int, int, int]:
    """(token, reserved, internal) of `held` slots of a sequence that will hold `final_kv_len`."""
    will_use = min(held, max(final_kv_len, token))
    return token, will_use - token, held - will_use


def declares(obj: object, flag: str) -> bool:
    """Whether `obj`'s own class sets `flag` true in its body: a fast path a class declares
    is not inherited, so a subclass that changes what the path assumes stays on the general
    one until it declares the path itself."""
    return bool(type(obj).__dict__.get(flag, False))


class CacheStrategy(ABC):
    """Decides which arena slots each sequence's KV occupies.

    The engine calls `admit` when a waiting sequence is scheduled for (re)computation,
    `allocate` before every step for the tokens the sequence computes in it, `free` when it
    finishes or is preempted, and `fork` for parallel-sampling children. `build_layout`
    hands the result to the executor.

    Two costs stay flat in the number of running sequences and their lengths, so that every
    strategy's engine step costs the same on the host: a strategy logs each change to its
    tables (`_log_table`) and the executor applies the log to arrays it keeps, and it keeps
    running totals of the slots its sequences hold (`_account`), so `memory_split` does not
    walk block tables. `check_accounting` (or `KVBENCH_CHECK_ACCOUNTING=1`) recomputes every
    split from scratch and raises when the totals disagree.
    """

    name: str = "?"
    layout_kind: str = "paged"
    table_block_size: int = 1  # token positions per table entry (contiguous: one start slot)
    # Set true in a strategy's own class body (`declares`) when it reads sequences' lengths
    # only, never their token ids: under an executor that reads none either (`kvbench
    # simulate`), sequences then count their tokens and the workload's prompts stay undrawn.
    reads_no_token_ids: bool = False
    admits_chunks: bool = False  # `admit` takes the step's chunk (`admit`)
    # A host tier under the prefix cache (`host_offload.HostOffload`: its `loading` maps the
    # sequences that wait for their KV to arrive; the engine leaves them out of steps and
    # hands its executor's finished copies to `host_jobs_done`); None: none.
    host_tier = None

    def __init__(
        self, num_slots: int, max_model_len: int, check_accounting: bool | None = None
    ) -> None:
        self.num_slots = num_slots
        self.max_model_len = max_model_len
        if check_accounting is None:
            check_accounting = os.environ.get(CHECK_ACCOUNTING_ENV, "") not in ("", "0")
        self.check_accounting = check_accounting
        self._table_log: list[TableOp] = []
        # False under an executor that reads no KV tables (`Executor.reads_kv_tables`): the
        # changes are not logged, and `build_layout` hands over an empty log.
        self.keeps_table_log = True
        # One table log per allocation group (`hybrid`, windowed `contiguous`); None: one table
        self._group_logs: list[list[TableOp]] | None = None
        # seq_id -> (held slots, slots it will use, prompt blocks) of each sequence holding memory
        self._held: dict[int, tuple[int, int, int]] = {}
        self._held_slots = 0
        self._will_use_slots = 0
        self._prompt_blocks = 0
        self._copies: list[SlotCopy] = []  # decided since the last `pending_copies`

    def reset_stats(self) -> None:
        """Zero the strategy's own counters after a warm-up (none by default)."""
        return None

    def residency_books(self) -> ResidencyBooks | None:
        """The residency of its cached blocks, for a strategy with a prefix cache."""
        return None

    def set_clock(self, clock: Callable[[], float]) -> None:
        """The engine's run clock, read by the books that time blocks (`residency_books`)."""
        books = self.residency_books()
        if books is not None:
            books.set_clock(clock)

    @property
    def capacity_tokens(self) -> int:
        """Slots that can hold KV (the arena rounded down to whole blocks for paged)."""
        return self.num_slots

    @property
    def capacity_slots(self) -> int:
        """`capacity_tokens` in `required_slots`' unit (`hybrid`: pool slots)."""
        return self.capacity_tokens

    @abstractmethod
    def required_slots(self, seq: Sequence) -> int:
        """Slots the sequence needs to be admitted and finish alone in an empty arena: a
        function of its prompt and output lengths alone (the engine keeps it by them)."""

    @abstractmethod
    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        """Whether `admit` would succeed now (without changing anything)."""

    @abstractmethod
    def admit(self, seq: Sequence) -> int:
        """Take the memory to (re)compute the sequence's uncomputed tokens; returns how many
        leading tokens are already cached (prefix hits), which the engine marks computed.

        A strategy that sets `admits_chunks` takes `admit(seq, max_new_tokens)`: memory for
        the first `max_new_tokens` of the tokens left after its prefix hits (the chunk the
        step computes; None: all), later chunks taking theirs through `allocate`, as vLLM's
        `allocate_slots`; `can_admit` still checks that the whole sequence fits."""

    @abstractmethod
    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Make room for `num_new_tokens` more tokens; False when the arena cannot."""

    def prefill_chunk(self, seq: Sequence, num_new_tokens: int,
                      max_num_batched_tokens: int | None = None) -> int:
        """The tokens of a prompt chunk of `num_new_tokens` the step computes: all of them
        (`prefix` cuts a hybrid's chunk to a block boundary, where a state can be kept, and
        may leave none: the sequence then computes nothing this step).
        `max_num_batched_tokens`: the step's token budget (None: unbounded)."""
        return num_new_tokens

    def admission_chunk(self, seq: Sequence, num_new_tokens: int,
                        max_num_batched_tokens: int | None = None) -> int:
        """`prefill_chunk` of a waiting sequence's first chunk of at most `num_new_tokens`,
        after the prefix hits admission would give it, asked before admitting it: 0, and
        it is not admitted this step (vLLM's scheduler stops admitting there)."""
        return num_new_tokens

    def has_pending_copies(self) -> bool:
        return bool(self._copies)

    def books_totals(self) -> tuple[int, int, int]:
        """(held slots, slots that will be used, prompt blocks): the running totals."""
        return self._held_slots, self._will_use_slots, self._prompt_blocks

    @abstractmethod
    def free(self, seq: Sequence) -> None:
        """Give back everything the sequence holds."""

    def swap_out(self, seq: Sequence) -> bool:
        """Preemption by swap (`--preemption-mode swap`): keep the sequence's computed KV in
        a host tier until it is admitted again (which then loads it instead of recomputing)
        and free its memory as `free` does. False, nothing done: no swap space (the caller
        frees it and it recomputes)."""
        return False

    @abstractmethod
    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """Give `child` the parent's cached tokens; None when the arena cannot."""

    @abstractmethod
    def slot_of(self, seq: Sequence, position: int) -> int: ...

    def memory_split(self, running: list[Sequence], head_waiting: Sequence | None,
                     computed_tokens: int | None = None) -> MemorySplit:
        """The split in slots, from the sequences that hold memory and the queue head;
        `computed_tokens`: their `num_computed`, summed, where the caller knows it and theirs
        are not current (members of the engine's decode cohort: `kvbench.engine.fast_forward`)."""
        split = (self._split_from_totals(running, head_waiting) if computed_tokens is None
                 else self._split_from_totals(running, head_waiting, computed_tokens))
        if self.check_accounting:
            expected = self.memory_split_from_scratch(running, head_waiting)
            if split != expected:
                raise AssertionError(f"{self.name}: running memory totals {split} differ from "
                                     f"the from-scratch split {expected}")
        return split

    @abstractmethod
    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        """The same split recomputed from every sequence's allocation (the debug check)."""

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None,
        computed_tokens: int | None = None,
    ) -> MemorySplit:
        # Computed tokens change outside the strategy (the engine commits them): one sum over
        # the running sequences, not over their blocks.
        token = (sum(seq.num_computed for seq in running) if computed_tokens is None
                 else computed_tokens)
        return MemorySplit(
            token=token,
            reserved=self._will_use_slots - token,
            internal=self._held_slots - self._will_use_slots,
            free=self.num_slots - self._held_slots,
        )

    def _account(self, seq: Sequence, held_slots: int, prompt_blocks: int = 0) -> None:
        """Record that `seq` now holds `held_slots` (0: nothing) in the running totals."""
        old_held, old_will, old_prompt = self._held.pop(seq.seq_id, (0, 0, 0))
        final_kv_len = seq.end_len - 1  # `final_kv_len`: this runs at every block a sequence takes
        will = held_slots if held_slots < final_kv_len else final_kv_len
        self._held_slots += held_slots - old_held
        self._will_use_slots += will - old_will
        self._prompt_blocks += prompt_blocks - old_prompt
        if held_slots:
            self._held[seq.seq_id] = (held_slots, will, prompt_blocks)

    def _log_table(self, seq_id: int, index: int, value: int) -> None:
        """Entry `index` of the sequence's table is now `value` (`DROP_TABLE`: table gone)."""
        if self.keeps_table_log:
            self._table_log.append((seq_id, index, value))

    def _log_drop(self, seq_id: int) -> None:
        if self.keeps_table_log:
            self._table_log.append((seq_id, DROP_TABLE, 0))

    @abstractmethod
    def is_whole(self) -> bool:
        """True when no slot is held by anyone (prefix-cache blocks count as free)."""

    def pending_copies(self) -> list[SlotCopy]:
        """Copies (fork, copy-on-write) decided since the last call, to run before the step."""
        copies, self._copies = self._copies, []
        return copies

    def stats(self) -> dict[str, float]:
        """Strategy-specific counters for the summary (evictions, hit rate, ...)."""
        return {}

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        """The step's sequences and the table changes since the last layout (handed over once:
        the executor that receives it must apply them)."""
        log, self._table_log = self._table_log, []
        group_logs = self._group_logs
        if group_logs is not None:  # a table per allocation group: every layer reads its own
            self._group_logs, log = [[] for _ in group_logs], []
        return KVLayout(
            kind=self.layout_kind,
            query_lens=[n for _, n in scheduled],
            seq_lens=[seq.num_computed + n for seq, n in scheduled],
            block_size=self.table_block_size,
            slot_copies=self.pending_copies(),
            seq_ids=[seq.seq_id for seq, _ in scheduled],
            table_log=log,
            group_table_logs=group_logs,
        )
