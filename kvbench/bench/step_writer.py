"""`StepWriter`: streams `steps.csv` to disk and keeps the per-step totals a summary needs.

A long simulation runs hundreds of thousands of steps; keeping every `StepRecord` and
converting them at the end cost more CPU than the simulation and memory that grew with every
step. The writer formats each row as it comes (optionally every Nth only: `--steps-every`)
and folds every row, written or not, into `StepTotals`, so the summary is over all steps.
"""

from __future__ import annotations

import csv
import dataclasses
import operator
import os
from pathlib import Path
from typing import IO, Any

from kvbench.core.step_record import StepRecord

COLUMNS = tuple(f.name for f in dataclasses.fields(StepRecord))
_ROW = operator.attrgetter(*COLUMNS)
SPLIT_PARTS = ("token", "reserved", "internal", "external", "free", "cached")
_MAX_COLUMNS = ("kv_prompt_blocks", "gpu_used_bytes", "torch_reserved_bytes")
_MAXED = operator.attrgetter(*_MAX_COLUMNS)
_NO_VALUES = (None,) * len(_MAX_COLUMNS)


class _Weighted:
    """A weighted mean built one value at a time (`None` while no weight was added)."""

    __slots__ = ("total", "weight")

    def __init__(self) -> None:
        self.total = 0.0
        self.weight = 0.0

    def add(self, value: float, weight: float) -> None:
        self.total += value * weight
        self.weight += weight

    def mean(self) -> float | None:
        return self.total / self.weight if self.weight > 0 else None


@dataclasses.dataclass
class StepTotals:
    """What `kvbench.bench.runner.summarize` reads from the steps, over every step.

    The memory means are time-weighted (docs/design.md, Memory split): a step's
    memory state lasts until the next step starts (the last one: its own length), which is
    why each row is folded in when the next one arrives.
    """

    steps: int = 0
    preemptions: int = 0
    batch_sum: int = 0
    batch_max: int | None = None
    waiting_sum: int = 0
    overhead_ms: float = 0.0
    step_ms: float = 0.0
    maxima: dict[str, int | None] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(_MAX_COLUMNS))
    _util: _Weighted = dataclasses.field(default_factory=_Weighted)
    _saturated: _Weighted = dataclasses.field(default_factory=_Weighted)
    _any_saturated: bool = False
    # Time-weighted sums of each split part's share of the arena, and their weight: plain
    # floats, updated inline (this runs once per step of a simulation).
    _part_sums: list[float] = dataclasses.field(default_factory=lambda: [0.0] * 6)
    _part_weight: float = 0.0
    _held_back: StepRecord | None = None

    def add(self, record: StepRecord) -> None:
        self.steps += 1
        self.preemptions += record.preemptions
        batch = record.num_prefill_seqs + record.num_decode_seqs
        self.batch_sum += batch
        if self.batch_max is None or batch > self.batch_max:
            self.batch_max = batch
        self.waiting_sum += record.num_waiting
        self.overhead_ms += record.overhead_ms
        self.step_ms += record.step_ms
        values = _MAXED(record)
        if values != _NO_VALUES:  # a simulation or a CPU run has none of them
            maxima = self.maxima
            for column, value in zip(_MAX_COLUMNS, values, strict=True):
                if value is not None:
                    old = maxima[column]
                    maxima[column] = value if old is None or value > old else old
        previous, self._held_back = self._held_back, record
        if previous is not None:
            duration_s = previous.step_ms / 1e3
            self._fold(previous, max(record.t_s - previous.t_s, duration_s))

    def finish(self) -> None:
        """Fold in the last row (weighted by its own length)."""
        last, self._held_back = self._held_back, None
        if last is not None:
            self._fold(last, last.step_ms / 1e3)

    def _fold(self, r: StepRecord, weight_s: float) -> None:
        held = r.kv_token_bytes + r.kv_reserved_bytes + r.kv_internal_bytes + \
            r.kv_external_bytes
        arena = held + r.kv_free_bytes
        if held > 0:
            util = r.kv_token_bytes / held
            self._util.add(util, weight_s)
            if r.num_waiting > 0:
                self._any_saturated = True
                self._saturated.add(util, weight_s)
        if arena > 0:
            sums = self._part_sums
            self._part_weight += weight_s
            sums[0] += r.kv_token_bytes / arena * weight_s
            sums[1] += r.kv_reserved_bytes / arena * weight_s
            sums[2] += r.kv_internal_bytes / arena * weight_s
            sums[3] += r.kv_external_bytes / arena * weight_s
            sums[4] += r.kv_free_bytes / arena * weight_s
            sums[5] += r.kv_cached_bytes / arena * weight_s

    def memory(self) -> dict[str, Any]:
        """`summary.json`'s memory means: utilization (all and saturated steps) and the split."""
        if self.steps == 0:
            return {"utilization_mean": None, "utilization_saturated": None,
                    "breakdown_mean": {p: None for p in SPLIT_PARTS}}
        weight = self._part_weight
        return {
            "utilization_mean": self._util.mean(),
            "utilization_saturated": self._saturated.mean() if self._any_saturated else None,
            "breakdown_mean": {p: (total / weight if weight > 0 else None)
                               for p, total in zip(SPLIT_PARTS, self._part_sums, strict=True)},
        }


class StepWriter:
    """Writes `steps.csv` row by row; every row goes into `totals`, every Nth to the file.

    Rows go to a hidden partial file that `close` renames into place, so a run killed
    mid-replay leaves no truncated `steps.csv` (docs/design.md, Results contract).
    """

    def __init__(self, path: Path, every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"steps every {every}: must be at least 1")
        self.path = Path(path)
        self.every = every
        self.totals = StepTotals()
        self.rows_written = 0
        self._partial = self.path.with_name(f".{self.path.name}.partial")
        self._file: IO[str] | None = self._partial.open("w", newline="")
        self._csv = csv.writer(self._file, lineterminator="\n")
        self._csv.writerow(COLUMNS)

    def write(self, record: StepRecord) -> None:
        if self.totals.steps % self.every == 0:
            # csv writes None as an empty cell, as pandas writes a missing value.
            self._csv.writerow(_ROW(record))
            self.rows_written += 1
        self.totals.add(record)

    def close(self) -> StepTotals:
        if self._file is not None:
            self._file.close()
            self._file = None
            os.replace(self._partial, self.path)
        self.totals.finish()
        return self.totals
