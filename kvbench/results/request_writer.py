"""`RequestWriter`: streams finished requests' `requests.csv` rows to a partial file.

The run's `requests.csv` is written whole at its end, atomically (docs/design.md, Results
contract). Until then every request that finishes is appended, as one row, to
`.requests.csv.partial` (a row per sample) and flushed to the operating system, so a run killed mid-replay
(`kill -9`, the machine's out-of-memory killer) keeps every request that had finished;
`kvbench report --allow-incomplete` shows them. The rows are `request_records`' own dicts,
whatever columns they hold; the first row's keys are the header.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.metrics import request_records

REQUESTS_PARTIAL = ".requests.csv.partial"


class RequestWriter:
    """Appends finished requests' rows to `folder/.requests.csv.partial` as they finish;
    `close` removes the file once the whole `requests.csv` is written."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / REQUESTS_PARTIAL
        self.rows_written = 0
        self._file: IO[str] | None = self.path.open("w", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file, lineterminator="\n")
        self._columns: list[str] | None = None  # the first row's keys

    def write(self, requests: Iterable[Request], samples: dict[int, list[Sequence]]) -> None:
        """Append the rows of `requests` (each finished: every sample done) and flush them,
        so that a kill after this call keeps them."""
        if self._file is None:
            return
        rows = list(request_records(list(requests), samples))
        if not rows:
            return
        if self._columns is None:
            self._columns = list(rows[0])
            self._csv.writerow(self._columns)
        self._csv.writerows([row.values() for row in rows])
        self._file.flush()
        self.rows_written += len(rows)

    def close(self) -> None:
        """Stop writing and remove the partial file: `requests.csv` now holds every row."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)

    def abandon(self) -> None:
        """Stop writing and keep the partial file: `requests.csv` could not be written. Rows
        a full disk refused stay out of it (its reader drops a last line cut short)."""
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError:
                pass


__all__ = ["REQUESTS_PARTIAL", "RequestWriter"]
