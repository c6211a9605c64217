"""The grid: one `Point` (a `RunConfig` and a stable, readable id) per combination of axes.

A point's id is its axis values in axis order, `strategy=paged,request_rate=4`, and names its
run folder inside the sweep folder; the same values always give the same id, which is what
`--resume` and the capacity search rely on to find a point already run. Combinations that
build the same run (e.g. a `reserve` axis crossed with `paged`, which has no reservation)
are run once: the first one is kept and the others are reported as duplicates.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from kvbench.session.run_config import RunConfig
from kvbench.sweep.config import SweepSpec
from kvbench.sweep.options import display_name, run_config_for, value_text
from kvbench.sweep.slo import per_request_slo

BASE_POINT_ID = "base"  # the one point of a sweep without axes
MAX_ID_CHARS = 150
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass
class Point:
    point_id: str
    values: dict[str, Any]  # axis name -> value, in axis order
    run: RunConfig
    source: str = "grid"  # grid | search (a capacity-search probe)
    duplicates: list[str] = field(default_factory=list)  # ids of combinations merged here


def point_id(values: dict[str, Any]) -> str:
    """`{"strategy": "paged", "request_rate": 4.0}` -> `strategy=paged,request_rate=4`."""
    if not values:
        return BASE_POINT_ID
    text = ",".join(
        f"{display_name(k)}={_UNSAFE.sub('_', value_text(v))}" for k, v in values.items()
    )
    if len(text) > MAX_ID_CHARS:
        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        text = f"{text[:MAX_ID_CHARS - 11]}~{digest}"
    return text


def run_key(run: RunConfig) -> str:
    return json.dumps(run.to_dict(), sort_keys=True, default=str)


def make_point(spec: SweepSpec, values: dict[str, Any], source: str = "grid") -> Point:
    run = run_config_for(spec.kind, {**spec.base, **values}, per_request_slo(spec.slo))
    return Point(point_id(values), dict(values), run, source)


def expand_grid(spec: SweepSpec) -> list[Point]:
    """Every combination of `spec.axes` (the last axis varies fastest), duplicates merged."""
    names = list(spec.axes)
    points: list[Point] = []
    by_key: dict[str, Point] = {}
    for combo in itertools.product(*(spec.axes[n] for n in names)):
        point = make_point(spec, dict(zip(names, combo, strict=True)))
        key = run_key(point.run)
        if key in by_key:
            by_key[key].duplicates.append(point.point_id)
            continue
        by_key[key] = point
        points.append(point)
    _check_unique(points)
    return points


def group_values(spec: SweepSpec, without: str) -> list[dict[str, Any]]:
    """The combinations of every axis but `without` (one empty dict when there is none)."""
    names = [n for n in spec.axes if n != without]
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(spec.axes[n] for n in names))
    ]


def _check_unique(points: list[Point]) -> None:
    seen: dict[str, int] = {}
    for point in points:
        count = seen.get(point.point_id, 0)
        seen[point.point_id] = count + 1
        if count:
            point.point_id = f"{point.point_id}~{count + 1}"
