"""`StepWriter`: streams `steps.csv` in batches (every Nth row with `--steps-every`) and folds
every row, written or not, into the `StepTotals` the summary reads.
"""

from __future__ import annotations

import dataclasses
import operator
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from kvbench.core.decode_run_rows import DecodeRunLog, DecodeRunRows, RunArrays
from kvbench.core.step_record import StepRecord
from kvbench.results.columns import Columns
from kvbench.results.csv_table import csv_text

COLUMNS = tuple(f.name for f in dataclasses.fields(StepRecord))
_ROW = operator.attrgetter(*COLUMNS)
SPLIT_PARTS = ("token", "reserved", "internal", "external", "free", "cached")
_MAX_COLUMNS = ("kv_prompt_blocks", "gpu_used_bytes", "torch_reserved_bytes")
_FLOAT_COLUMNS = frozenset(f.name for f in dataclasses.fields(StepRecord)
                           if "float" in str(f.type))
_INT_COLUMNS = frozenset(COLUMNS) - _FLOAT_COLUMNS
_INDEX = {name: i for i, name in enumerate(COLUMNS)}
_PART_COLUMNS = tuple(_INDEX[f"kv_{part}_bytes"] for part in SPLIT_PARTS)
_FOLDED = frozenset((*_PART_COLUMNS, _INDEX["num_waiting"]))  # the columns `_fold_sums` reads
# `StepTotals`' time-weighted sums: the utilization's (all steps, saturated steps) with their
# weights, then the split's weight and each split part's share of the arena.
_SUMS = ("util_total", "util_weight", "saturated_total", "saturated_weight", "part_weight",
         *SPLIT_PARTS)


class StepRows:
    """A batch of `steps.csv` rows, one numpy array per column (`COLUMNS` order) with the dtype
    pandas reads it back as (int64; float64, also for an int column with an empty cell)."""

    __slots__ = ("columns",)

    def __init__(self, columns: list[np.ndarray]) -> None:
        self.columns = columns

    @classmethod
    def of_tuples(cls, rows: Sequence[tuple]) -> StepRows:
        """Rows given as `COLUMNS` tuples."""
        if not rows:
            return cls([np.empty(0) for _ in COLUMNS])
        return cls([_column_array(list(values), name in _FLOAT_COLUMNS)
                    for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True)])

    def __len__(self) -> int:
        return len(self.columns[0])

    def array(self, index: int) -> np.ndarray:
        return self.columns[index]

    def part(self, start: int, stop: int) -> StepRows:
        """Rows `start:stop`."""
        return StepRows([values[start:stop] for values in self.columns])

    def last_row(self) -> tuple:
        return tuple(values[-1].item() for values in self.columns)

    def tuples(self) -> list[tuple]:
        """The rows as `COLUMNS` tuples (an empty cell NaN)."""
        return list(zip(*(values.tolist() for values in self.columns), strict=True))

    def text(self, start: int = 0, every: int = 1) -> bytes:
        """Rows `start::every` as lines of `steps.csv`."""
        return csv_text({name: values[start::every]
                         for name, values in zip(COLUMNS, self.columns, strict=True)},
                        header=False, ints=_INT_COLUMNS)


def _column_array(values: list, is_float: bool) -> np.ndarray:
    # An int column whose cells are all ints reads as int64; with an empty cell (None) or a
    # float (a NaN where the run kept no KV books) as float64.
    if not is_float and set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array(values, dtype=np.float64)  # (None is NaN)


def _as_read(values: np.ndarray, is_float: bool) -> np.ndarray:
    """An int column's values as pandas reads them back: int64 unless one is missing."""
    if not is_float and values.dtype.kind == "f" and not np.isnan(values).any():
        return values.astype(np.int64)
    return values


def batch_rows(single: list[tuple], single_at: Sequence[int], arrays: RunArrays | None,
               num_rows: int) -> StepRows:
    """`num_rows` rows: the rows `single` (`COLUMNS` tuples, in the places `single_at`) and
    the rows of runs (`DecodeRunLog.expand`), expanded together with numpy."""
    if arrays is None:
        return StepRows.of_tuples(single)
    at = arrays.at
    alone = StepRows.of_tuples(single).columns if single else None
    where = np.asarray(single_at, dtype=np.int64)
    columns: list[np.ndarray] = []
    for index, values in enumerate(_run_columns(arrays)):
        if values is None:  # a column no run fills: empty in their rows
            values = np.full(len(at), np.nan)
        kinds = {values.dtype.kind} | ({alone[index].dtype.kind} if alone else set())
        full = np.empty(num_rows, dtype=np.float64 if "f" in kinds else np.int64)
        full[at] = values
        if alone:
            full[where] = alone[index]
        columns.append(full)
    # The cells a run leaves empty where a full column is not: a utilization over nothing
    # held, prompt blocks of a run that does not report them.
    for name, empty in (
            ("kv_utilization", arrays.held + arrays.per_row("external") == 0),
            ("kv_prompt_blocks", arrays.per_row("has_prompt_blocks") == 0)):
        if empty.any():
            index = _INDEX[name]
            columns[index] = columns[index].astype(np.float64)
            columns[index][at[empty]] = np.nan
    return StepRows(columns)


def _run_columns(arrays: RunArrays) -> list[np.ndarray | None]:
    """The runs' rows, a `COLUMNS` array each (None: a column no run fills), computed as
    `DecodeRunRows.rows` computes them."""
    b = arrays.per_row("bytes_per_slot")
    num_seqs = arrays.per_row("num_seqs")
    token, reserved, internal, external, free = arrays.slot_parts()
    rows = len(token)
    last_rows = arrays.first_row + arrays.of_run("num_steps") - 1
    running = num_seqs.copy()
    running[last_rows] = arrays.of_run("num_running_last")
    preemptions = np.zeros(rows, dtype=np.int64)
    preemptions[arrays.first_row] = arrays.of_run("preemptions")
    denominator = arrays.held + external
    utilization = np.divide(token, denominator, out=np.zeros(rows), where=denominator != 0)
    zeros = np.zeros(rows, dtype=np.int64)
    return [
        arrays.per_row("first_step") + arrays.step_in_run,  # step
        arrays.start_s,  # t_s
        (arrays.end_s - arrays.start_s) * 1e3,  # step_ms
        np.zeros(rows),  # overhead_ms
        zeros,  # num_prefill_seqs
        num_seqs,  # num_decode_seqs
        num_seqs,  # num_batched_tokens
        zeros,  # num_prefill_tokens
        running,  # num_running
        arrays.per_row("num_waiting"),
        token * b,  # kv_token_bytes
        reserved * b,  # kv_reserved_bytes
        internal * b,  # kv_internal_bytes
        external * b,  # kv_external_bytes
        free * b,  # kv_free_bytes
        arrays.per_row("cached") * b,  # kv_cached_bytes
        preemptions,
        utilization,  # kv_utilization
        arrays.prompt if arrays.of_run("has_prompt_blocks").any() else None,  # kv_prompt_blocks
        None, None, None,  # the device's memory: no probe runs with decode runs
        None, None, None,  # a host tier's copies: no host tier runs with decode runs
    ]


@dataclasses.dataclass
class StepTotals:
    """What `RunWriter.summarize` reads from the steps, over every step, summed with numpy a
    batch at a time. The memory means are time-weighted (docs/design.md, Memory split): a
    step's state lasts until the next step starts (the last: its own length), so each row is
    folded in when the next one arrives."""

    steps: int = 0
    preemptions: int = 0
    batch_sum: int = 0
    batch_max: int | None = None
    waiting_sum: int = 0
    overhead_ms: float = 0.0
    step_ms: float = 0.0
    maxima: dict[str, int | None] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(_MAX_COLUMNS))
    # The time-weighted sums (`_SUMS` order) and whether any step had a waiting queue.
    _sums: tuple[float, ...] = (0.0,) * len(_SUMS)
    _any_saturated: bool = False
    _held_back: tuple | None = None

    def add_rows(self, rows: StepRows | Sequence[tuple]) -> None:
        """Fold in rows (a `StepRows` batch, or `COLUMNS` tuples), oldest first. Everything
        is computed before any total changes, so an interrupt leaves the totals with all of
        the rows or none."""
        if not len(rows):
            return
        if not isinstance(rows, StepRows):
            rows = StepRows.of_tuples(rows)
        column = rows.array
        batch = column(_INDEX["num_prefill_seqs"]) + column(_INDEX["num_decode_seqs"])
        maxima = dict(self.maxima)
        for name in _MAX_COLUMNS:
            values = column(_INDEX[name])
            values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
            if values.size:
                old, most = maxima[name], int(values.max())
                maxima[name] = most if old is None else max(old, most)
        held = self._held_back
        sums = None
        if held is not None or len(rows) > 1:
            # Each row's memory state lasts until the next row starts: the row held back from
            # the last batch first, this batch's last held back in turn.
            def with_held(i: int) -> np.ndarray:
                values = column(i).astype(float)
                return values if held is None else np.concatenate(
                    [np.array([held[i]], dtype=float), values])

            lasted_s = np.maximum(np.diff(with_held(_INDEX["t_s"])),
                                  with_held(_INDEX["step_ms"])[:-1] / 1e3)
            sums = _fold_sums({i: with_held(i)[:-1] for i in _FOLDED}, lasted_s)
        step_ms = float(np.sum(column(_INDEX["step_ms"]).astype(float, copy=False)))
        overhead_ms = float(np.sum(column(_INDEX["overhead_ms"]), dtype=float))
        preemptions = int(column(_INDEX["preemptions"]).sum())
        waiting = int(column(_INDEX["num_waiting"]).sum())
        # then every total at once
        self.steps += len(rows)
        self.preemptions += preemptions
        self.batch_sum += int(batch.sum())
        most = int(batch.max())
        self.batch_max = most if self.batch_max is None else max(self.batch_max, most)
        self.waiting_sum += waiting
        self.overhead_ms += overhead_ms
        self.step_ms += step_ms
        self.maxima = maxima
        self._held_back = rows.last_row()
        if sums is not None:
            self._apply(sums)

    def finish(self) -> None:
        """Fold in the last row (weighted by its own length)."""
        last, self._held_back = self._held_back, None
        if last is not None:
            self._apply(_fold_sums({i: np.array([last[i]], dtype=float) for i in _FOLDED},
                                   np.array([last[_INDEX["step_ms"]] / 1e3], dtype=float)))

    def _apply(self, sums: tuple[np.ndarray, bool]) -> None:
        self._sums = tuple((np.array(self._sums) + sums[0]).tolist())
        self._any_saturated = self._any_saturated or sums[1]

    def memory(self) -> dict[str, Any]:
        """`kvbench_summary.json`'s memory means: utilization (all and saturated steps) and the
        split."""
        if self.steps == 0:
            return {"utilization_mean": None, "utilization_saturated": None,
                    "breakdown_mean": {p: None for p in SPLIT_PARTS}}
        util_total, util_weight, saturated_total, saturated_weight, weight, *parts = (
            self._sums)
        saturated = (saturated_total / saturated_weight
                     if self._any_saturated and saturated_weight > 0 else None)
        return {
            "utilization_mean": util_total / util_weight if util_weight > 0 else None,
            "utilization_saturated": saturated,
            "breakdown_mean": {p: (total / weight if weight > 0 else None)
                               for p, total in zip(SPLIT_PARTS, parts, strict=True)},
        }


def _fold_sums(columns: dict[int, np.ndarray], weight_s: np.ndarray,
               ) -> tuple[np.ndarray, bool]:
    """The sums (`_SUMS`) of rows given as the columns of `_FOLDED` (by index), each row
    weighted by how long its memory state lasted, and whether a row had a waiting queue."""
    parts = np.stack([columns[i] for i in _PART_COLUMNS], axis=1)
    token = parts[:, 0]
    held = parts[:, 0] + parts[:, 1] + parts[:, 2] + parts[:, 3]
    arena = held + parts[:, 4]
    sums = np.zeros(len(_SUMS))
    any_saturated = False
    has_held = held > 0  # NaN (no KV books: hf-generate) is neither held nor an arena
    if has_held.any():
        w = weight_s[has_held]
        util = token[has_held] / held[has_held]
        sums[0:2] = np.sum(util * w), np.sum(w)
        waiting = columns[_INDEX["num_waiting"]][has_held] > 0
        if waiting.any():
            any_saturated = True
            sums[2:4] = np.sum(util[waiting] * w[waiting]), np.sum(w[waiting])
    has_arena = arena > 0
    if has_arena.any():
        w = weight_s[has_arena]
        sums[4] = np.sum(w)
        sums[5:] = (parts[has_arena] / arena[has_arena, None] * w[:, None]).sum(axis=0)
    return sums, any_saturated


# The columns of steps.csv that a report draws (kept in memory for the session's report, and
# all `kvbench report` parses: the GPU memory and prompt-block columns are never drawn).
CHART_STEP_COLUMNS = frozenset({
    "t_s", "step_ms", "num_prefill_seqs", "num_decode_seqs", "num_batched_tokens",
    "num_running", "num_waiting", "preemptions", "kv_utilization", "kv_token_bytes",
    "kv_reserved_bytes", "kv_internal_bytes", "kv_external_bytes", "kv_free_bytes",
    "kv_cached_bytes",
})
# Rows a writer holds before it formats them and folds them into its totals at once.
_CHUNK_ROWS = 4096
# The most rows `StepColumns` holds (15 columns: 120 MB); a longer run's report reads its
# steps back from the file.
KEEP_MAX_ROWS = 1_000_000


class StepColumns:
    """Some columns of the rows a writer writes to `steps.csv`, kept in memory with the dtypes
    pandas reads them back as: what the session's report draws. Beyond `max_rows` rows it
    lets them go (`dropped`)."""

    def __init__(self, names: frozenset[str] | set[str], max_rows: int | None = None) -> None:
        self._wanted = [(name, _INDEX[name], name in _FLOAT_COLUMNS)
                        for name in COLUMNS if name in names]
        self._parts: dict[str, list[np.ndarray]] | None = {
            name: [] for name, _, _ in self._wanted}
        self.max_rows = KEEP_MAX_ROWS if max_rows is None else max_rows
        self.num_rows = 0

    @property
    def dropped(self) -> bool:
        return self._parts is None

    def add(self, rows: StepRows, start: int = 0, every: int = 1) -> None:
        """Rows `start::every` of a batch."""
        if self._parts is None:
            return
        count = len(range(start, len(rows), every))
        if self.num_rows + count > self.max_rows:
            self._parts = None
            return
        for name, index, is_float in self._wanted:
            # (its dtype from the rows written only, as pandas reads the file)
            self._parts[name].append(_as_read(rows.array(index)[start::every].copy(), is_float))
        self.num_rows += count

    def columns(self) -> Columns | None:
        """The rows kept, as `Columns`; None once dropped."""
        if self._parts is None:
            return None
        return Columns({name: np.concatenate(parts) if parts else np.empty(0)
                        for name, parts in self._parts.items()})


class StepWriter:
    """Writes `steps.csv` in batches of rows; every row goes into `totals`, every Nth to the
    file (in the run's working folder: docs/design.md, Results contract)."""

    def __init__(self, path: Path, every: int = 1, keep: StepColumns | None = None) -> None:
        if every < 1:
            raise ValueError(f"steps every {every}: must be at least 1")
        self.path = Path(path)
        self.every = every
        # The columns of the rows written that are also kept in memory (the report's).
        self.kept = keep
        self.totals = StepTotals()
        self.rows_written = 0
        self._file: IO[bytes] | None = self.path.open("wb")
        self._file.write((",".join(COLUMNS) + "\n").encode())
        # Rows not expanded yet: single rows (with their places among them) and runs.
        self._pending: list[tuple] = []
        self._pending_at = array("q")
        self._runs = DecodeRunLog()
        self._pending_rows = 0
        # Who else reads the runs' rows (`StepRecorder.stream_to`: the group sums).
        self.run_arrays_sink: Callable[[RunArrays], None] | None = None
        # Expanded batches of `_CHUNK_ROWS` rows (the last one at `close`: what is left).
        self._ready: list[StepRows] = []
        self._ready_on_disk = False  # the first ready batch is written, not yet folded

    def write(self, record: StepRecord) -> None:
        self.write_rows([_ROW(record)])

    def write_rows(self, rows: list[tuple]) -> None:
        """Rows of consecutive steps (`COLUMNS` tuples)."""
        n = self._pending_rows
        if len(rows) == 1:  # (a step stepped alone: most calls)
            self._pending.append(rows[0])
            self._pending_at.append(n)
        else:
            self._pending += rows
            self._pending_at.extend(range(n, n + len(rows)))
        self._pending_rows = n + len(rows)
        if self._pending_rows >= _CHUNK_ROWS:
            self._flush()

    def write_run(self, run: DecodeRunRows) -> None:
        """`write_rows` of a run of decode steps' rows, expanded later with other runs'."""
        self._runs.add(self._pending_rows, run)
        self._pending_rows += len(run.ends_s)
        if self._pending_rows >= _CHUNK_ROWS:
            self._flush()

    def _flush(self, last: bool = False) -> None:
        """Expand the held rows into batches of `_CHUNK_ROWS` (`last`: the rest too, a
        shorter batch), then write each and fold it into the totals. The held rows are
        replaced by the batches in one statement, after the expansion, and a batch is let go
        only once it is written and folded: a Ctrl-C between the two (the fold is Python
        code) leaves it held, and `close` finishes it without writing its rows twice, so
        steps.csv and the summary always cover the same steps."""
        if self._pending_rows >= _CHUNK_ROWS or (last and self._pending_rows):
            arrays = self._runs.expand() if self._runs else None
            rows = batch_rows(self._pending, self._pending_at, arrays, self._pending_rows)
            full = len(rows) - len(rows) % _CHUNK_ROWS
            ready = [rows.part(start, start + _CHUNK_ROWS)
                     for start in range(0, full, _CHUNK_ROWS)]
            rest = rows.part(full, len(rows)).tuples() if full < len(rows) else []
            if last and rest:
                ready.append(rows.part(full, len(rows)))
                rest = []
            self._ready, self._pending, self._pending_rows, self._pending_at, self._runs = (
                self._ready + ready, rest, len(rest), array("q", range(len(rest))),
                DecodeRunLog())
            if arrays is not None and self.run_arrays_sink is not None:
                self.run_arrays_sink(arrays)
        while self._ready:
            rows = self._ready[0]
            if not self._ready_on_disk:
                self._write_batch(rows)
                self._ready_on_disk = True
            self.totals.add_rows(rows)
            self._ready.pop(0)
            self._ready_on_disk = False

    def _write_batch(self, rows: StepRows) -> None:
        # The kept columns just before the write: little may stand between the two (a Ctrl-C
        # there would keep them again at `close`).
        first = -self.totals.steps % self.every  # the first of these rows that is an Nth
        text = rows.text(first, self.every)
        if self.kept is not None:
            self.kept.add(rows, first, self.every)
        self._file.write(text)
        self._file.flush()  # (a killed run's file: every batch written so far)
        self.rows_written += len(range(first, len(rows), self.every))

    def close(self) -> StepTotals:
        if self._file is not None:
            try:
                self._flush(last=True)
            except BaseException:
                self._file.close()  # (the file keeps what was written)
                self._file = None
                raise
            self._file.close()
            self._file = None
        self.totals.finish()
        return self.totals
