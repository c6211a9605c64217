"""`csv_text`: columns of numbers as CSV text, written by pyarrow's CSV writer, each column's
text read back by pandas as its dtype (pyarrow writes a whole float as `1`: floats get `.0`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

_OPTIONS = pa_csv.WriteOptions(include_header=False, quoting_style="none")
_TYPES = {np.dtype(np.int64): pa.int64(), np.dtype(np.int32): pa.int32(),
          np.dtype(np.float64): pa.float64(), np.dtype(np.bool_): pa.bool_()}


def csv_text(columns: Mapping[str, np.ndarray], header: bool = True,
             ints: frozenset[str] | set[str] = frozenset()) -> bytes:
    """The columns (numpy arrays of one length) as CSV, header first when asked. A column
    named in `ints` holds ints: as float64 (NaN at its gaps) it is written as ints, empty at
    the gaps, when every value is whole (as pandas reads such a column back: float64)."""
    table = pa.table({name: _cells(values, name in ints) for name, values in columns.items()})
    out = pa.BufferOutputStream()
    if header:
        out.write((",".join(columns) + "\n").encode())
    if table.num_rows:
        pa_csv.write_csv(table, out, _OPTIONS)
    return out.getvalue().to_pybytes()


def arrow_array(values: np.ndarray, missing: np.ndarray | None = None) -> pa.Array:
    """A numpy array (int64, int32, float64 or bool) as an Arrow array, null where `missing`.
    Made from its buffers: `pa.array` would import pandas to check what it is given, which
    a run otherwise never imports (`Columns`)."""
    values = np.ascontiguousarray(values)
    data = np.packbits(values, bitorder="little") if values.dtype == np.bool_ else values
    validity = (None if missing is None or not missing.any()
                else pa.py_buffer(np.packbits(~missing, bitorder="little")))
    return pa.Array.from_buffers(_TYPES[values.dtype], len(values),
                                 [validity, pa.py_buffer(data)])


def _cells(values: np.ndarray, ints: bool) -> pa.Array:
    if values.dtype == np.bool_:
        return pc.utf8_capitalize(pc.cast(arrow_array(values), pa.string()))  # True, False
    if values.dtype.kind != "f":
        return arrow_array(values.astype(np.int64, copy=False))
    nan = np.isnan(values)
    if nan.all():  # a column no row fills (a simulation's device memory): empty cells
        return pa.nulls(len(values))
    array = arrow_array(values, nan)
    whole = np.floor(values) == values  # (False at NaN)
    if ints and np.array_equal(whole, ~nan) and not np.isinf(values).any():
        return array.cast(pa.int64())
    text = pc.cast(array, pa.string())
    if not whole.any():
        return text
    # A whole float's text gets its ".0" (pyarrow writes 1.0 as "1"; 1e+16 and inf stay).
    return pc.replace_substring_regex(text, pattern=r"^(-?\d+)$", replacement=r"\1.0")
