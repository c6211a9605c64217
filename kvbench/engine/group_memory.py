"""`GroupMemory`: each KV group's part of the memory split over a run, and KV held per token.

A strategy with one table for every layer holds the same slots in every model KV group, so a
group's bytes are the split's slots x the group's bytes per token, derived at the end.
`hybrid` (and windowed `contiguous`) keeps a split per allocation group (`MemorySplit.groups`),
each slot `group_size` layers' bytes, its free slots the shared pool's. Means are weighted by
step duration (docs/design.md, Memory split). *KV held per token* is the mean held bytes over
the mean computed tokens of the sequences holding memory.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.core.decode_run_rows import DecodeRunLog, DecodeRunRows, RunArrays
from kvbench.strategies.base import MemorySplit

if TYPE_CHECKING:
    import numpy as np

PARTS = ("token", "reserved", "internal", "external", "free")
_FOLD_STEPS = 1 << 16  # steps held before they are summed


@dataclass(frozen=True)
class GroupShape:
    """One group the report shows: `window` None for full attention."""

    layers: tuple[int, ...]
    window: int | None
    bytes_per_slot: int  # bytes of one of the split's slots in this group


class GroupMemory:
    """Step-duration-weighted sums of the split, total and per group; `add` once a step.

    The parts are kept per step in flat arrays and summed with numpy a batch at a time
    (`_fold`): a long simulation adds millions of steps (most a fast-forwarded run's at once,
    `add_decode_run`), where a float sum a step in Python would cost more than the step."""

    def __init__(self, shapes: tuple[GroupShape, ...], bytes_per_slot: int,
                 per_group_splits: bool) -> None:
        self.shapes = shapes
        self.bytes_per_slot = bytes_per_slot
        self.per_group_splits = per_group_splits
        self.reset()

    def reset(self) -> None:
        self._weight_s = 0.0
        self._held_s = 0.0
        self._tokens_s = 0.0
        self._total = [0.0] * len(PARTS)  # slot-seconds of the whole split
        self._groups = [[0.0] * len(PARTS) for _ in self.shapes]
        self._held_max = [0] * len(self.shapes)
        self._start_pending()

    def _start_pending(self) -> None:
        # Steps not folded yet: those added one at a time (duration, then token, reserved,
        # internal, external, free slots and the holders' computed tokens, a flat array each,
        # and each one's place among the pending steps) and the runs (each with its first
        # step's place).
        self._pending = [array("d") for _ in range(len(PARTS) + 2)]
        self._pending_at = array("q")
        self._runs = DecodeRunLog()
        self._num_pending = 0

    def add(self, dt_s: float, split: MemorySplit) -> None:
        tokens = split.sequence_tokens if split.sequence_tokens is not None else split.token
        self.add_parts(dt_s, split.token, split.reserved, split.internal, split.external,
                       split.free, tokens)
        if self.per_group_splits:  # one split per allocation group
            for sums, part, g in zip(self._groups, split.groups, range(len(self.shapes)),
                                     strict=False):
                sums[0] += dt_s * part.token
                sums[1] += dt_s * part.reserved
                sums[2] += dt_s * part.internal
                if part.held > self._held_max[g]:
                    self._held_max[g] = part.held

    def add_parts(self, dt_s: float, token: int, reserved: int, internal: int, external: int,
                  free: int, sequence_tokens: int | None = None) -> None:
        """`add` of a split given by its parts; `sequence_tokens`: the computed tokens of the
        sequences holding memory, when they are not the split's `token`. A strategy with a
        split per group adds the groups' parts itself (`add`)."""
        dts, tokens, reserveds, internals, externals, frees, seq_tokens = self._pending
        self._pending_at.append(self._num_pending)
        self._num_pending += 1
        dts.append(dt_s)
        tokens.append(token)
        reserveds.append(reserved)
        internals.append(internal)
        externals.append(external)
        frees.append(free)
        seq_tokens.append(token if sequence_tokens is None else sequence_tokens)
        if self._num_pending >= _FOLD_STEPS:
            self._fold()

    def add_decode_run(self, run: DecodeRunRows) -> None:
        """`add_parts` of each step of a run of decode steps (a strategy with one split): its
        steps are expanded with the other runs' when they are summed."""
        if self.per_group_splits:
            raise ValueError("a decode run has no per-group splits to record")
        self._runs.add(self._num_pending, run)
        self._num_pending += len(run.ends_s)
        if self._num_pending >= _FOLD_STEPS:
            self._fold()

    def add_run_arrays(self, arrays: RunArrays) -> None:
        """`add_decode_run` of runs already expanded (by the steps' writer), summed now."""
        if self.per_group_splits:
            raise ValueError("a decode run has no per-group splits to record")
        dts, *parts, seq_tokens = _run_steps(arrays)
        self._add_sums(dts, parts, seq_tokens)

    def _fold(self) -> None:
        """Sum the pending steps into the totals."""
        pending, count, runs, at = self._pending, self._num_pending, self._runs, self._pending_at
        self._start_pending()
        if not count:
            return
        import numpy as np  # here: the CLI's help imports the engine, and stays light

        if runs:  # each quantity over the steps in order: the single steps', the runs'
            columns = [np.empty(count) for _ in pending]
            if at:
                single = np.frombuffer(at, dtype=np.int64)
                for column, values in zip(columns, pending, strict=True):
                    column[single] = values
            arrays = runs.expand()
            for column, values in zip(columns, _run_steps(arrays), strict=True):
                column[arrays.at] = values
            dts, *parts, seq_tokens = columns
        else:
            dts, *parts, seq_tokens = [np.array(a, dtype=np.float64) for a in pending]
        self._add_sums(dts, parts, seq_tokens)

    def _add_sums(self, dts: np.ndarray, parts: list[np.ndarray],
                  seq_tokens: np.ndarray) -> None:
        """Add steps given as arrays: durations, the split's parts, the holders' tokens."""
        # Products summed by numpy's pairwise sum, not `@`: OpenBLAS's dot product splits long
        # vectors over its threads, and its last bits then depend on how many it runs.
        held = parts[0] + parts[1] + parts[2] + parts[3]
        self._weight_s += float(dts.sum())
        self._held_s += float((dts * held).sum())
        self._tokens_s += float((dts * seq_tokens).sum())
        total = self._total
        for i, part in enumerate(parts):
            total[i] += float((dts * part).sum())
        most = int(held.max())
        if not self.per_group_splits and self._held_max and most > self._held_max[0]:
            self._held_max = [most] * len(self.shapes)

    def summary(self) -> dict[str, Any]:
        """`kv_held_bytes_per_token` and `kv_groups` of the summary's memory section."""
        self._fold()
        w = self._weight_s
        per_token = (self._held_s * self.bytes_per_slot / self._tokens_s
                     if self._tokens_s > 0 else None)
        groups = []
        for g, shape in enumerate(self.shapes):
            b = shape.bytes_per_slot
            sums = self._groups[g] if self.per_group_splits else self._total
            means = {f"{p}_bytes_mean": (sums[i] * b / w if w > 0 else None)
                     for i, p in enumerate(PARTS)}
            if self.per_group_splits:
                means["free_bytes_mean"] = None  # the pool's, shared: in the total only
            groups.append({
                "attention": "full" if shape.window is None else "sliding",
                "window": shape.window,
                "num_layers": len(shape.layers),
                "bytes_per_slot": b,
                **means,
                "held_bytes_max": self._held_max[g] * b,
            })
        return {"kv_held_bytes_per_token": per_token, "kv_groups": groups}


def _run_steps(arrays: RunArrays) -> tuple[np.ndarray, ...]:
    """The runs' steps as `add_parts` takes them: duration, then token, reserved, internal,
    external and free slots, and the holders' computed tokens."""
    parts = arrays.slot_parts()
    return (arrays.end_s - arrays.start_s, *parts, parts[0])

