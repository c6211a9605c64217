"""`Columns`: a table as named numpy arrays of equal length, what the summary and the report
read of `requests.csv` and `steps.csv`: a run hands its rows over in this form, so `run` and
`simulate` never import pandas (docs/design.md, Results contract).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Columns:
    """Named columns (numpy arrays, one value per row), in order. Reads like the parts of a
    pandas frame the metrics use: `table["ttft_ms"]`, `"sample" in table`, `table.empty`,
    `len(table)` (rows), iteration over the names."""

    __slots__ = ("_data", "num_rows")

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = {str(name): np.asarray(values) for name, values in data.items()}
        lengths = {len(values) for values in self._data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self.num_rows = lengths.pop() if lengths else 0

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Columns:
        """A pandas frame's columns (its index dropped)."""
        return cls({name: frame[name].to_numpy() for name in frame.columns})

    def frame(self) -> pd.DataFrame:
        """The columns as a pandas frame."""
        import pandas as pd  # (only for a caller that wants a frame)

        return pd.DataFrame(self._data, columns=list(self._data))

    @property
    def empty(self) -> bool:
        """No column or no row, as a frame's `empty`."""
        return not self._data or self.num_rows == 0

    @property
    def names(self) -> list[str]:
        return list(self._data)

    def __len__(self) -> int:
        return self.num_rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._data.get(name, default)

    def floats(self, name: str) -> np.ndarray:
        """A column as float64 (a missing value NaN)."""
        return np.asarray(self._data[name], dtype=np.float64)

    def take(self, rows: np.ndarray) -> Columns:
        """The rows at `rows` (indices, or a mask), every column."""
        return Columns({name: values[rows] for name, values in self._data.items()})


def as_columns(table: Columns | pd.DataFrame) -> Columns:
    """`table` as `Columns` (a pandas frame's columns; `Columns` as it is)."""
    return table if isinstance(table, Columns) else Columns.from_frame(table)
