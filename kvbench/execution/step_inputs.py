"""Persistent host arrays for a step's index inputs, and their one transfer to the device.

`BlockTableArrays` applies the strategies' table logs (a block id set, a contiguous start
slot, a table dropped) to one preallocated array with a row per live sequence, so a step's
block tables are a row gather and its slot mapping a vectorised lookup, whatever the
strategy. `StepInputs` packs every index a step needs into one staging buffer (pinned on
CUDA) and copies it to the device in a single transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import torch

from kvbench.core.layout import DROP_TABLE, KVLayout, TableOp
from kvbench.core.step_batch import StepBatch


class BlockTableArrays:
    """Row `r` holds the table of the sequence mapped to `r`; `lengths[r]` its entries."""

    def __init__(self, rows: int = 64, width: int = 16) -> None:
        self.table = np.zeros((rows, width), dtype=np.int64)
        self.lengths = np.zeros(rows, dtype=np.int64)
        self.row_of: dict[int, int] = {}
        self._free_rows = list(range(rows - 1, -1, -1))

    def apply(self, log: list[TableOp]) -> None:
        for seq_id, index, value in log:
            if index == DROP_TABLE:
                row = self.row_of.pop(seq_id, None)
                if row is not None:
                    self.lengths[row] = 0
                    self._free_rows.append(row)
                continue
            row = self.row_of.get(seq_id)
            if row is None:
                row = self._new_row(seq_id)
            if index >= self.table.shape[1]:
                self._grow(width=max(2 * self.table.shape[1], index + 1))
            self.table[row, index] = value
            if index >= self.lengths[row]:
                self.lengths[row] = index + 1

    def _new_row(self, seq_id: int) -> int:
        if not self._free_rows:
            old = self.table.shape[0]
            self._grow(rows=2 * old)
            self._free_rows = list(range(2 * old - 1, old - 1, -1))
        row = self._free_rows.pop()
        self.row_of[seq_id] = row
        return row

    def _grow(self, rows: int | None = None, width: int | None = None) -> None:
        old_rows, old_width = self.table.shape
        rows, width = rows or old_rows, width or old_width
        table = np.zeros((rows, width), dtype=np.int64)
        table[:old_rows, :old_width] = self.table
        self.table = table
        lengths = np.zeros(rows, dtype=np.int64)
        lengths[:old_rows] = self.lengths
        self.lengths = lengths

    def rows(self, seq_ids: list[int]) -> np.ndarray:
        if len(seq_ids) == 1:
            return np.array([self.row_of[seq_ids[0]]], dtype=np.int64)
        return np.array(itemgetter(*seq_ids)(self.row_of), dtype=np.int64)


def token_positions(query_lens: np.ndarray, seq_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(batch row, position) of every new token, sequences in batch order."""
    num_tokens = int(query_lens.sum())
    if num_tokens == len(query_lens):  # all decodes: one token each
        return np.arange(num_tokens), seq_lens - 1
    seq_of = np.repeat(np.arange(len(query_lens)), query_lens)
    first = np.cumsum(query_lens) - query_lens
    offset = np.arange(num_tokens) - first[seq_of]
    return seq_of, (seq_lens - query_lens)[seq_of] + offset


@dataclass
class HostIndices:
    """A step's index inputs on the host (int64 numpy arrays)."""

    slot_mapping: np.ndarray
    seq_lens: np.ndarray
    query_start_loc: np.ndarray  # prefills only
    tables: np.ndarray  # [seqs, width]: block tables, or start slots as one column
    # More than one allocation group: `slot_mapping` is [groups x tokens] and `tables`
    # [groups x seqs, width], group by group.
    num_groups: int = 1


def layout_indices(layout: KVLayout, arrays: BlockTableArrays, num_prefill: int,
                   group_arrays: list[BlockTableArrays] | None = None) -> HostIndices:
    """Apply the layout's table log to `arrays` and derive the step's indices from them; a
    layout with a table per allocation group (`group_table_logs`) applies each group's log
    to its own entry of `group_arrays` (grown as needed) and stacks the groups' indices:
    block tables (`hybrid`), or each sequence's start slot and ring length (`contiguous` with
    windows: token p of a ring group at `start + p % ring`)."""
    seq_lens = np.asarray(layout.seq_lens, dtype=np.int64)
    query_lens = np.asarray(layout.query_lens, dtype=np.int64)
    qsl = np.zeros(num_prefill + 1, dtype=np.int64)
    np.cumsum(query_lens[:num_prefill], out=qsl[1:])
    if layout.seq_ids is None:  # spelled out by hand
        if layout.kind == "paged":
            width = max((len(t) for t in layout.block_tables), default=1) or 1
            tables = np.zeros((len(layout.block_tables), width), dtype=np.int64)
            for i, t in enumerate(layout.block_tables):
                tables[i, : len(t)] = t
        else:
            tables = np.asarray(layout.start_slots, dtype=np.int64).reshape(-1, 1)
        slots = np.asarray(layout.slot_mapping, dtype=np.int64)
        return HostIndices(slots, seq_lens, qsl, tables)
    logs = layout.group_table_logs
    if logs is None:
        logs, group_arrays = [layout.table_log], [arrays]
    assert group_arrays is not None
    while len(group_arrays) < len(logs):
        group_arrays.append(BlockTableArrays())
    per_group = []
    for group, log in zip(group_arrays, logs, strict=False):
        group.apply(log)
        per_group.append((group, group.rows(layout.seq_ids)))
    width = max(max(int(a.lengths[r].max(initial=1)), 1) for a, r in per_group)
    seq_of, positions = token_positions(query_lens, seq_lens)
    num_seqs, num_tokens, bs = len(seq_lens), len(positions), layout.block_size
    tables = np.zeros((len(logs) * num_seqs, width), dtype=np.int64)
    slots = np.empty(len(logs) * num_tokens, dtype=np.int64)
    for g, (group, rows) in enumerate(per_group):
        t = tables[g * num_seqs : (g + 1) * num_seqs]
        w = min(width, group.table.shape[1])
        t[:, :w] = group.table[rows, :w]
        part = slots[g * num_tokens : (g + 1) * num_tokens]
        if layout.kind == "paged":
            part[:] = t[seq_of, positions // bs] * bs + positions % bs
        elif width == 1:  # a start slot per sequence
            part[:] = t[seq_of, 0] + positions
        else:  # (start slot, ring length; 0: no ring) per sequence
            ring = t[seq_of, 1]
            part[:] = t[seq_of, 0] + np.where(ring > 0, positions % np.maximum(ring, 1),
                                              positions)
    return HostIndices(slots, seq_lens, qsl, tables, num_groups=len(logs))


@dataclass
class DeviceIndices:
    """A step's inputs on the device: views into one transferred buffer."""

    input_ids: torch.Tensor  # long
    positions: torch.Tensor  # long
    sample_rows: torch.Tensor  # long
    slot_mapping: torch.Tensor  # long
    seq_lens: torch.Tensor  # int32
    query_start_loc: torch.Tensor  # int32
    tables: torch.Tensor  # int32 [seqs, width]
    num_prefill_seqs: int
    num_prefill_tokens: int
    # One allocation group's slots and tables per entry (`hybrid`); None: `slot_mapping` and
    # `tables` serve every layer.
    group_slot_mappings: torch.Tensor | None = None  # long [groups, tokens]
    group_tables: torch.Tensor | None = None  # int32 [groups, seqs, width]

    @property
    def start_slots(self) -> torch.Tensor:
        return self.tables[:, 0]


# Every part of the packed buffer starts on a 16-byte boundary (4 elements: 16 bytes as int32,
# 32 as int64):
# Triton specializes pointer arguments on 16-byte alignment, so a part whose offset moved
# with the batch size (an odd decode batch) would compile another kernel variant mid-run.
PART_ALIGN_ELEMENTS = 4


def aligned_starts(sizes: list[int]) -> list[int]:
    """Start of each part of `sizes` elements, each a multiple of `PART_ALIGN_ELEMENTS`; the
    last entry is the total length."""
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + -(-n // PART_ALIGN_ELEMENTS) * PART_ALIGN_ELEMENTS)
    return starts


class StepInputs:
    """Builds a step's device inputs from persistent host state, one transfer per step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.arrays = BlockTableArrays()
        self.group_arrays: list[BlockTableArrays] = []  # one per allocation group (`hybrid`)
        self._pin = device.type == "cuda"
        self._staging = self._host_buffer(1 << 12)  # (reused off the CPU: pinned on CUDA)
        self._copied: torch.cuda.Event | None = None  # the last transfer out of `_staging`

    def _host_buffer(self, n: int) -> torch.Tensor:
        return torch.empty(n, dtype=torch.int64, pin_memory=self._pin)

    def _packed(self, parts: list, starts: list[int],
                sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Every part packed into one int64 buffer and, off the CPU, copied to the device at
        once; the int32 parts converted there, keeping their element offsets in their own
        (aligned) tensor. On the CPU the buffer is fresh: the step's tensors own it."""
        total = starts[-1]
        if self.device.type == "cpu":
            staging = np.empty(total, dtype=np.int64)
        else:
            if self._copied is not None:  # the previous transfer must have read the buffer
                self._copied.synchronize()
            if total > self._staging.numel():
                self._staging = self._host_buffer(max(total, 2 * self._staging.numel()))
            staging = self._staging.numpy()
        for part, at, n in zip(parts, starts[:-1], sizes, strict=True):
            staging[at : at + n] = part
        if self.device.type == "cpu":
            flat = torch.from_numpy(staging)
        else:
            flat = self._staging[:total].to(self.device, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()
        return flat, flat[starts[4] :].to(torch.int32)

    def build(self, batch: StepBatch) -> DeviceIndices:
        host = layout_indices(batch.layout, self.arrays, batch.num_prefill_seqs,
                              self.group_arrays)
        num_tokens = batch.num_tokens
        long_parts = [batch.input_ids, batch.positions, batch.sample_rows, host.slot_mapping]
        int_parts = [host.seq_lens, host.query_start_loc, host.tables.reshape(-1)]
        sizes = [num_tokens, num_tokens, len(batch.sample_rows), len(host.slot_mapping)]
        sizes += [len(p) for p in int_parts]
        starts = aligned_starts(sizes)
        int_at = [at - starts[4] for at in starts[4:-1]]
        flat, int_flat = self._packed(long_parts + int_parts, starts, sizes)
        part = [flat[at : at + n] for at, n in zip(starts[:4], sizes[:4], strict=True)]
        part += [int_flat[at : at + n] for at, n in zip(int_at, sizes[4:], strict=True)]
        p = batch.num_prefill_seqs
        tables = part[6].view(-1, host.tables.shape[1])
        num_seqs = len(host.seq_lens)
        group_slots = group_tables = None
        # One paged group reads as one table; a contiguous group's table also carries its
        # ring lengths, which only the per-group path reads (`contiguous` with windows).
        layout = batch.layout
        if host.num_groups > 1 or (layout.group_table_logs is not None
                                   and layout.kind != "paged"):
            group_slots = part[3].view(host.num_groups, -1)
            group_tables = tables.view(host.num_groups, num_seqs, -1)
        return DeviceIndices(
            input_ids=part[0],
            positions=part[1],
            sample_rows=part[2],
            slot_mapping=part[3][:num_tokens] if group_slots is not None else part[3],
            seq_lens=part[4],
            query_start_loc=part[5],
            tables=tables[:num_seqs],
            num_prefill_seqs=p,
            num_prefill_tokens=int(host.query_start_loc[-1]),
            group_slot_mappings=group_slots,
            group_tables=group_tables,
        )
