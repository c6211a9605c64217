"""Figures as the JSON plotly.js draws, written as plotly.py writes it: numpy arrays as typed
arrays (`{"dtype": "f8", "bdata": <base64>}`, one copy of the bytes, no Python per element),
non-finite numbers elsewhere as null, and `<`, `>`, `/` escaped so that the text is safe
inside a `<script>` element."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from kvbench.results.metrics import nan_to_none

# plotly.js's short names of the dtypes it reads from typed arrays.
_SHORT_DTYPES = {"int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4",
                 "uint32": "u4", "float32": "f4", "float64": "f8"}
# plotly.js has no 64-bit integers: plotly.py narrows them to the smallest type that holds
# every value, as done here.
_NARROWER = {"int64": (np.int8, np.int16, np.int32), "uint64": (np.uint8, np.uint16, np.uint32)}
_HTML_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("/", "\\u002f"))


def typed_array(values: np.ndarray) -> dict[str, str] | list[Any]:
    """`values` as a plotly.js typed array (what plotly.py's `to_typed_array_spec` makes); a
    list where plotly.js has no such type (bool, object, strings) or the array is empty."""
    array = np.asarray(values)
    if array.size == 0:
        return []
    narrower = _NARROWER.get(array.dtype.name)
    if narrower is not None:
        low, high = array.min(), array.max()
        for dtype in narrower:
            if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
                array = array.astype(dtype)
                break
    short = _SHORT_DTYPES.get(array.dtype.name)
    if short is None:
        return array.tolist()
    spec = {"dtype": short, "bdata": base64.b64encode(np.ascontiguousarray(array)).decode("ascii")}
    if array.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in array.shape)
    return spec


def _default(value: Any) -> Any:
    """What `json` cannot write by itself (numpy scalars are Python's: `nan_to_none`)."""
    if isinstance(value, np.ndarray):
        return typed_array(value)
    raise TypeError(f"cannot write {type(value).__name__} into a figure: give numpy arrays, "
                    "lists or numbers")


def to_json(value: Any) -> str:
    """`value` (dicts, lists, numbers, strings, numpy arrays) as compact JSON, safe to inline
    in a `<script>` element."""
    # a NaN outside an array as null: plotly.js reads it as a gap
    text = json.dumps(nan_to_none(value), separators=(",", ":"), default=_default, allow_nan=False)
    for unsafe, safe in _HTML_UNSAFE:
        text = text.replace(unsafe, safe)
    return text


def figure_json(figure: Any) -> str:
    """A figure (`kvbench.report.figure.Figure`) as `{"data": [...], "layout": {...}}`."""
    return to_json({"data": figure.data, "layout": figure.layout})
