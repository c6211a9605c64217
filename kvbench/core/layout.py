"""`KVLayout`: where a step's tokens live in the KV arena, handed from strategy to executor."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvbench.core.host_transfers import HostTransfers

# One change to a sequence's table: (seq_id, index, value). The value is a block id (paged) or
# the start slot (contiguous, index 0); index `DROP_TABLE` drops the sequence's whole table.
TableOp = tuple[int, int, int]
DROP_TABLE = -1


@dataclass
class SlotCopy:
    """Copy `num_slots` slots of KV from `src_slot` to `dst_slot` before the step (fork, CoW)."""

    src_slot: int
    dst_slot: int
    num_slots: int


@dataclass(frozen=True)
class HostCopy:
    """Whole blocks copied between the KV arena and a host tier before the step's forward, in
    the order the layout lists them: a "store" copies arena block `gpu_blocks[i]` to host block
    `host_blocks[i]`, a "load" host block `host_blocks[i]` to arena block `gpu_blocks[i]`."""

    direction: str  # "store" | "load"
    gpu_blocks: tuple[int, ...]
    host_blocks: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.direction not in ("store", "load"):
            raise ValueError(f"a host copy is a 'store' or a 'load', not {self.direction!r}")
        if len(self.gpu_blocks) != len(self.host_blocks):
            raise ValueError("a host copy pairs each arena block with one host block")


@dataclass
class KVLayout:
    """Per scheduled sequence (in batch order): its new tokens' slots and how to find its past.

    `kind` is "paged" (read through block tables, `block_size`) or "contiguous" (read from
    start slots). `seq_lens[i]` counts the sequence's tokens in the cache once this step's
    tokens are written; `query_lens[i]` how many of them this step computes.

    A strategy's layout names its sequences (`seq_ids`) and carries `table_log`, the changes
    to the tables since the previous layout: the executor keeps the tables in persistent
    arrays and derives slot mappings from them, so no per-token or per-block list is rebuilt
    each step. A layout built by hand (no `seq_ids`) spells out `slot_mapping` and
    `block_tables` or `start_slots` instead.

    `host_transfers`: blocks moved between the arena and a host tier before the step's
    forward (a strategy with a host tier: its store and load jobs; the executor copies, never
    chooses, and reports the jobs done); `host_copies` lists them as the copies it makes.

    `group_table_logs` (`hybrid`): one table log per allocation group
    (`kvbench.core.kv_allocation`), each layer reading its group's tables; None: one table
    per sequence serves every layer (`table_log`).

    `state_blocks` (a state-space hybrid under `paged`): per scheduled sequence, the pool
    blocks its recurrent layers' state lives in (the strategy's choice; the executor reads
    and writes the state in those blocks' bytes: `kvbench.execution.pooled_states`). None: the
    model keeps no state.

    `state_copies` (`prefix` on a hybrid): (source blocks, destination blocks) of a whole
    state's bytes, copied in order before the step's forward: a hit's checkpoint into the
    sequence's running state, a running state into a checkpoint the strategy just named (the
    state as the previous steps left it), a parent's state into a fork's.
    """

    kind: str
    slot_mapping: list[int] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    seq_lens: list[int] = field(default_factory=list)
    block_size: int = 1
    block_tables: list[list[int]] = field(default_factory=list)
    start_slots: list[int] = field(default_factory=list)
    slot_copies: list[SlotCopy] = field(default_factory=list)
    seq_ids: list[int] | None = None
    table_log: list[TableOp] = field(default_factory=list)
    group_table_logs: list[list[TableOp]] | None = None
    # The step's host copies as jobs (what the executor reports done, for a strategy that
    # waits on them); None: none (no host tier, or nothing to copy).
    host_transfers: HostTransfers | None = None
    state_blocks: list[list[int]] | None = None
    state_copies: list[tuple[list[int], list[int]]] = field(default_factory=list)

    @property
    def host_copies(self) -> tuple[HostCopy, ...]:
        """`host_transfers` as the copies the model executor makes, in order."""
        return () if self.host_transfers is None else host_copies(self.host_transfers)


def host_copies(transfers: HostTransfers) -> tuple[HostCopy, ...]:
    """The jobs' copies as the model executor takes them (`KVLayout.host_copies`): the
    stores first (they read blocks a load may not overwrite before), then the loads."""
    out = []
    for direction, copies in (("store", transfers.stores), ("load", transfers.loads)):
        if copies:
            out.append(HostCopy(direction, tuple(g for _, g, _ in copies),
                                tuple(h for _, _, h in copies)))
    return tuple(out)
