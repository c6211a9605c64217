"""`RequestWriter`: streams finished requests' `requests.csv` rows in batches (`FLUSH_ROWS`
rows, or `FLUSH_EVERY_S` of wall time), so a killed run keeps them; the whole file is written
over them at the run's end (docs/design.md, Results contract).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.csv_table import csv_text
from kvbench.results.request_table import RequestTable

# How long a finished request's row may wait before it is written (seconds of wall time),
# and how many rows may wait.
FLUSH_EVERY_S = 0.1
FLUSH_ROWS = 256


class RequestWriter:
    """Appends finished requests' rows to `folder/requests.csv` a batch at a time;
    at the end of the run the whole `requests.csv` is written over them."""

    def __init__(self, folder: Path, flush_every_s: float = FLUSH_EVERY_S,
                 flush_rows: int = FLUSH_ROWS) -> None:
        self.path = Path(folder) / "requests.csv"  # written over whole at the run's end
        self.rows_written = 0
        self.flush_every_s = flush_every_s
        self.flush_rows = flush_rows
        self._file: IO[bytes] | None = self.path.open("wb")
        self._held: list[Request] = []
        self._samples: dict[int, list[Sequence]] = {}
        self._written_at = time.monotonic()
        self._tables: list[RequestTable] = []  # the rows written

    def write(self, requests: Iterable[Request], samples: dict[int, list[Sequence]]) -> None:
        """Take the rows of `requests` (each finished: every sample done; `samples` holds
        their sequences, which no longer change) and write every row held once
        `flush_rows` requests are held or `flush_every_s` has passed since the last write."""
        if self._file is None:
            return
        held = self._held
        held += requests
        self._samples = samples
        if len(held) >= self.flush_rows or \
                time.monotonic() - self._written_at >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        """Write every row held now."""
        self._written_at = time.monotonic()
        if self._file is None or not self._held:
            return
        held, self._held = self._held, []
        table = RequestTable.build(held, self._samples)
        self._file.write(csv_text(table.columns, header=not self.rows_written))
        self._file.flush()  # (a killed run's file: every batch written so far)
        self.rows_written += table.num_rows
        self._tables.append(table)

    def table(self, requests: list[Request], samples: dict[int, list[Sequence]],
              ) -> RequestTable:
        """`RequestTable.build(requests, samples)`, from the rows already built for the
        partial file where it can: the rows of the requests that finished are taken as they
        were written (a finished request's figures no longer change), the others built now,
        and all put in the order of `requests` (each request's rows together, in sample
        order). A long run's rows built again at the end would read every sequence again."""
        if self._held:  # (the rows held: built now, kept with the others)
            held, self._held = self._held, []
            self._tables.append(RequestTable.build(held, self._samples))
        ids = np.array([r.request_id for r in requests], dtype=np.int64)
        done = RequestTable.concat(self._tables)
        rest = RequestTable.build([requests[i] for i in np.flatnonzero(
            ~np.isin(ids, done.columns["request_id"])).tolist()], samples)
        table = RequestTable.concat([done, rest])
        # Each row's request's place in `requests` (a request's rows stay in sample order).
        sorter = np.argsort(ids, kind="stable")
        order = sorter[np.searchsorted(ids, table.columns["request_id"], sorter=sorter)]
        return table.take(np.argsort(order, kind="stable"))

    def close(self) -> None:
        """Stop writing: `requests.csv` now holds every row."""
        self._held = []
        self._tables = []
        if self._file is not None:
            self._file.close()
            self._file = None

    def abandon(self) -> None:
        """Write the rows held, stop writing and keep the streamed file: `requests.csv` could
        not be written. Rows a full disk refused stay out of it (its reader drops a last
        line cut short)."""
        if self._file is not None:
            file = self._file
            try:
                self.flush()
            except OSError:
                pass
            self._file = None
            try:
                file.close()
            except OSError:
                pass
