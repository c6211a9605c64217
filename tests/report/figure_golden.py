"""The figures a report draws, pinned for a fixed results folder (`data/compare-chat`, a
20-request `kvbench simulate` of contiguous, paged and prefix at 2 MiB: contiguous reserves,
paged and prefix preempt, prefix shares prompts).

`figure_golden.json` holds every chart of each case below as the figure JSON the page embeds
(typed arrays decoded to lists, plotly's template left out: `test_figure_json` checks it
apart). It was first written by the report that built `plotly.graph_objects` figures, so the
test holds the plain-dict figures to exactly what that report drew.

`python -m tests.report.figure_golden` rewrites it from the current code; do that only for a
change that is meant to move a chart, and say why in the commit.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvbench.report import charts, step_charts, timelines
from kvbench.report.figure_json import figure_json as kvbench_figure_json
from kvbench.report.runs import RunSet, load_runs
from kvbench.report.style import run_styles

DATA = Path(__file__).with_name("data") / "compare-chat"
GOLDEN_FILE = Path(__file__).with_name("figure_golden.json")

# Small limits, so that the thinned paths (bucket extremes, one preemption mark per stretch,
# CDF ranks, sampled steps) are drawn from a small folder.
THINNED = {(timelines, "MAX_POINTS"): 60, (timelines, "MAX_MARKS"): 2,
           (step_charts, "MAX_POINTS"): 40, (charts, "CDF_POINTS"): 12}


def _copy(dest: Path, strategies: tuple[str, ...] | None = None) -> Path:
    if strategies is None:
        return shutil.copytree(DATA, dest)
    dest.mkdir(parents=True)
    for name in strategies:
        shutil.copytree(DATA / name, dest / name)
    return dest


def _without_token_times(folder: Path) -> Path:
    for name in ("tokens.parquet", "tokens.jsonl"):
        for path in folder.rglob(name):
            path.unlink()
    return folder


def _with_accuracy(folder: Path) -> Path:
    path = folder / "kvbench_summary.json"
    summary = json.loads(path.read_text())
    summary["accuracy"] = {
        "top1_agreement": 0.98,
        "per_layer": {"k_rel_error": [0.01 + i / 1000 for i in range(32)],
                      "v_scale": [0.5 + (i % 7) / 10 for i in range(40)]},
        "short": [0.1, 0.2]}
    path.write_text(json.dumps(summary))
    return folder


def _case_runs(case: str, tmp: Path) -> RunSet:
    """Each case's runs, from copies of the data folder under `tmp` (folder names fixed:
    group tags come from them)."""
    if case == "comparison-thinned":
        return load_runs([_copy(tmp / "a-compare-chat")])
    if case == "two-folders-thinned":
        return load_runs([_copy(tmp / "a-compare-chat"), _copy(tmp / "b-compare-chat")])
    if case == "single-prefix":
        return load_runs([_copy(tmp / "prefix-run", ("prefix",)) / "prefix"])
    if case == "no-token-times-thinned":
        return load_runs([_without_token_times(_copy(tmp / "a-compare-chat"))])
    if case == "accuracy-thinned":
        return load_runs([_with_accuracy(_copy(tmp / "fp8-run", ("paged",)) / "paged")])
    raise KeyError(case)


# A case named `-thinned` draws under the THINNED limits; `single-prefix` under the real ones
# (its 108 steps and 20 requests are all drawn).
CASES = ("comparison-thinned", "two-folders-thinned", "single-prefix", "no-token-times-thinned",
         "accuracy-thinned")


@contextlib.contextmanager
def _limits(case: str) -> Iterator[None]:
    saved = {key: getattr(*key) for key in THINNED}
    if case.endswith("-thinned"):
        for (module, name), value in THINNED.items():
            setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def case_figures(case: str, to_json: Callable[[Any], dict[str, Any]],
                 tmp: Path) -> dict[str, dict[str, Any] | None]:
    """Every chart of `case` as `to_json` gives its figure (None: the chart is left out)."""
    runset = _case_runs(case, tmp)
    styles = run_styles(runset)
    with _limits(case):
        throughput = step_charts.throughput_timeline_figure(runset, styles)
        accurate = [r for r in runset.runs if r.summary.accuracy]
        made = {
            "throughput": charts.throughput_figure(runset, styles),
            "latency": charts.latency_cdf_figure(runset, styles),
            "ttft-split": charts.ttft_split_figure(runset, styles),
            "itl": charts.itl_cdf_figure(runset, styles),
            "throughput-time": None if throughput is None else throughput[0],
            "step-time": step_charts.step_time_figure(runset, styles),
            "memory": charts.memory_figure(runset),
            "timelines": timelines.timeline_figure(runset, styles),
            "memory-time": timelines.memory_timeline_figure(runset),
            "prefix": timelines.hit_rate_figure(runset, styles),
            "accuracy": charts.accuracy_figure(accurate, styles) if accurate else None,
        }
    return {name: None if fig is None else normalised(to_json(fig)) for name, fig in made.items()}


def decode_typed_arrays(value: Any) -> Any:
    """`value` with plotly's typed arrays (`{"dtype": "f8", "bdata": ...}`) as plain lists."""
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
            if "shape" in value:
                array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
            return array.tolist()
        return {key: decode_typed_arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_typed_arrays(item) for item in value]
    return value


def normalised(figure: dict[str, Any]) -> dict[str, Any]:
    """A figure's JSON as the golden file holds it: arrays decoded, the template left out."""
    layout = dict(figure.get("layout", {}))
    layout.pop("template", None)
    return decode_typed_arrays({"data": figure.get("data", []), "layout": layout})


def figure_json(fig: Any) -> dict[str, Any]:
    """The figure's JSON as the current report embeds it."""
    return json.loads(kvbench_figure_json(fig))


def write_golden() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        golden = {case: case_figures(case, figure_json, Path(tmp) / case) for case in CASES}
    # One line a chart: a change shows as the charts it moved.
    lines = [json.dumps(f"{case}/{name}") + ": " + json.dumps(_short(fig), sort_keys=True)
             for case, figures in golden.items() for name, fig in figures.items()]
    GOLDEN_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")


def _short(value: Any) -> Any:
    """Floats to 12 significant digits (the test compares to 1e-9): a smaller file."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _short(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_short(item) for item in value]
    return value


def read_golden() -> dict[str, dict[str, dict[str, Any] | None]]:
    """The golden file as {case: {chart: figure or None}}."""
    golden: dict[str, dict[str, Any]] = {}
    for key, fig in json.loads(GOLDEN_FILE.read_text()).items():
        case, name = key.split("/")
        golden.setdefault(case, {})[name] = fig
    return golden


if __name__ == "__main__":
    write_golden()
