"""`DecodeRunRows`: the `steps.csv` rows of a run of decode steps, described by a few numbers.

A fast-forwarded run (docs/simulator.md, Fast-forward) changes only the clock, one token per
sequence, and the books where a block fills, so its rows follow from the step ends, the
tokens before it and the books' totals after each step that allocated: one run's in Python
(`rows`), or many runs' at once with numpy (`DecodeRunLog`) when a writer streams millions,
by the same float operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

# (step in the run, held slots, slots that will be used, prompt blocks) after a decode run's
# step: the books' running totals after its allocations (`RunStrategy.grow_cohort_run`).
BooksAfterStep = tuple[int, int, int, int]


class DecodeRunRows(NamedTuple):
    """The rows of `len(ends_s)` decode steps of `num_seqs` sequences each, the first step
    numbered `first_step` and starting at `t_start_s`, each starting where the last ended.

    `token_slots`: the holders' computed tokens before the run (`num_seqs` more each step);
    `books`: the strategy's (held, will-use, prompt-block) totals after each step that changed
    them, `totals_before` before the first; `external`, `cached`, `has_prompt_blocks`: what
    the run keeps fixed; `preemptions`: the first row's (preemptions not in a row yet);
    `num_running_last`: the last row's running sequences (some finished in it). A named
    tuple, as cheap to make as a tuple: the engine makes one a run. (Its `len` is its
    fields', not its steps'.)"""

    first_step: int
    t_start_s: float
    ends_s: list[float]
    num_seqs: int
    num_waiting: int
    token_slots: int
    books: list[BooksAfterStep]
    totals_before: tuple[int, int, int]
    external: int
    cached: int
    has_prompt_blocks: bool
    num_slots: int
    bytes_per_slot: int
    preemptions: int
    num_running_last: int

    def rows(self) -> list[tuple]:
        """The rows as `StepRecord` field tuples, oldest first."""
        rows: list[tuple] = []
        h, w, p = self.totals_before
        books, i = self.books, 0
        n, b, external = self.num_seqs, self.bytes_per_slot, self.external
        last = len(self.ends_s) - 1
        for k, end in enumerate(self.ends_s):
            while i < len(books) and books[i][0] <= k:  # the books' totals after step k
                _, h, w, p = books[i]
                i += 1
            start = self.ends_s[k - 1] if k else self.t_start_s
            token = self.token_slots + n * (k + 1)
            rows.append((
                self.first_step + k, start, (end - start) * 1e3, 0.0, 0, n, n, 0,
                self.num_running_last if k == last else n, self.num_waiting,
                token * b, (w - token) * b, (h - w) * b, external * b,
                (self.num_slots - h - external) * b, self.cached * b,
                self.preemptions if k == 0 else 0,
                token / (h + external) if h + external else None,
                p if self.has_prompt_blocks else None, None, None, None, None, None, None))
        return rows

    def last_row(self) -> tuple:
        """The last of `rows` (read rarely: a progress bar's, a check's)."""
        return self.rows()[-1]


# A run's fixed numbers in `DecodeRunLog`, in this order; `at`: its first row's place among
# the rows of the log's owner.
_FIELDS = ("at", "first_step", "num_steps", "num_seqs", "num_waiting", "token_slots",
           "held_before", "will_before", "prompt_before", "external", "cached",
           "has_prompt_blocks", "num_slots", "bytes_per_slot", "preemptions",
           "num_running_last", "num_books")
_FIELD = {name: i for i, name in enumerate(_FIELDS)}


@dataclass(slots=True)
class RunArrays:
    """Every row of a log's runs, one array per quantity (numpy), oldest row first:
    `first_row[r]` is run r's first row, `run[i]` row i's run, `step_in_run[i]` its step in
    the run (from 0), `at[i]` its place among the log owner's rows."""

    fields: np.ndarray  # a row per run, `_FIELDS`
    first_row: np.ndarray
    run: np.ndarray
    step_in_run: np.ndarray
    at: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    token: np.ndarray  # the holders' computed tokens after the step
    held: np.ndarray
    will: np.ndarray
    prompt: np.ndarray

    def of_run(self, field: str) -> np.ndarray:
        """`field` of each run (int64)."""
        return self.fields[:, _FIELD[field]]

    def per_row(self, field: str) -> np.ndarray:
        """`field` of each row's run (int64)."""
        return self.of_run(field)[self.run]

    def slot_parts(self) -> tuple[np.ndarray, ...]:
        """Each row's memory split in slots, as `DecodeRunRows.rows` makes it: token,
        reserved, internal, external and free."""
        token, held, will = self.token, self.held, self.will
        external = self.per_row("external")
        return (token, will - token, held - will, external,
                self.per_row("num_slots") - held - external)


class DecodeRunLog:
    """Runs kept to be expanded later, many at once: each kind of value in a list of its own
    (the runs' fixed numbers, their step ends, their books), so that keeping a run is a few
    appends and `expand` makes every run's rows with numpy, not a pass over the runs."""

    def __init__(self) -> None:
        # Python lists, converted once by `expand` (a typed array would convert each value
        # as it goes in).
        self._fields: list[tuple[int, ...]] = []
        self._starts_s: list[float] = []
        self._ends_s: list[float] = []
        self._books: list[BooksAfterStep] = []

    def __len__(self) -> int:
        return len(self._starts_s)

    def add(self, at: int, run: DecodeRunRows) -> None:
        """Keep `run`, its first row the owner's row `at`."""
        (first_step, t_start_s, ends_s, num_seqs, num_waiting, token_slots, books,
         (held, will, prompt), external, cached, has_prompt_blocks, num_slots,
         bytes_per_slot, preemptions, num_running_last) = run
        self._fields.append((
            at, first_step, len(ends_s), num_seqs, num_waiting, token_slots, held, will,
            prompt, external, cached, has_prompt_blocks, num_slots, bytes_per_slot,
            preemptions, num_running_last, len(books)))
        self._starts_s.append(t_start_s)
        self._ends_s += ends_s
        if books:
            self._books += books

    def expand(self) -> RunArrays:
        """Every row of the kept runs: the same values as their `rows`, by the same float
        operations. (The log is left as it is: its owner replaces it once the rows are
        safely elsewhere.)"""
        import numpy as np  # here: the engine imports this module, and the CLI's help the engine

        # (fromiter over the flattened tuples: `np.array` of a list of tuples would look for
        # its shape first)
        fields = np.fromiter(chain.from_iterable(self._fields), dtype=np.int64,
                             count=len(self._fields) * len(_FIELDS)).reshape(-1, len(_FIELDS))
        start_of_run = np.fromiter(self._starts_s, dtype=np.float64, count=len(self._starts_s))
        end_s = np.fromiter(self._ends_s, dtype=np.float64, count=len(self._ends_s))
        books = np.fromiter(chain.from_iterable(self._books), dtype=np.int64,
                            count=len(self._books) * 4).reshape(-1, 4)
        count = len(fields)
        lengths = fields[:, _FIELD["num_steps"]]
        total = len(end_s)
        first_row = np.zeros(count, dtype=np.int64)
        np.cumsum(lengths[:-1], out=first_row[1:])
        run = np.repeat(np.arange(count), lengths)
        step_in_run = np.arange(total) - first_row[run]
        start_s = np.empty(total)
        start_s[1:] = end_s[:-1]
        start_s[first_row] = start_of_run
        token = (fields[:, _FIELD["token_slots"]][run]
                 + fields[:, _FIELD["num_seqs"]][run] * (step_in_run + 1))
        # The books' totals: each run's before its first row, then each change from its step
        # on (a later change at the same row wins), carried forward to every row.
        book_run = np.repeat(np.arange(count), fields[:, _FIELD["num_books"]])
        change_at = np.concatenate([first_row, first_row[book_run] + books[:, 0]])
        totals = np.concatenate([fields[:, _FIELD["held_before"] : _FIELD["prompt_before"] + 1],
                                 books[:, 1:]])
        order = np.argsort(change_at, kind="stable")  # a run's totals before, then its changes
        change = order[np.searchsorted(change_at[order], np.arange(total), side="right") - 1]
        held, will, prompt = totals[change].T
        at = fields[:, _FIELD["at"]][run] + step_in_run
        return RunArrays(fields, first_row, run, step_in_run, at, start_s, end_s, token, held,
                         will, prompt)
