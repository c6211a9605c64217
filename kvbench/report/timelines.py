"""Charts over a run's time: KV utilization, batch and queue, memory split, prefix hits."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.report.figure import Figure, subplots
from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import PART_COLORS, PART_TITLES, RunStyle, base_layout
from kvbench.report.thinning import extreme_rows, peak_rows
from kvbench.results.columns import Columns
from kvbench.strategies import STRATEGIES

MAX_POINTS = 1500  # per run and line: keeps the page light on long runs
MAX_MARKS = 300  # preemption marks per run: beyond, one per stretch of steps, with its total
MAX_MEMORY_PANELS = 8


def _thin(steps: Columns, series: list[np.ndarray]) -> tuple[Columns, np.ndarray]:
    """The steps a line chart of `series` (one value per step) draws, and their positions:
    every step of a short run; of a long one, each bucket's extremes of every series
    (`thinning.extreme_rows`), at most MAX_POINTS."""
    rows = extreme_rows([np.asarray(s, dtype=float) for s in series], MAX_POINTS)
    return (steps if len(rows) == len(steps) else steps.take(rows)), rows


def _utilization(steps: Columns) -> np.ndarray:
    if "kv_utilization" in steps:
        utilization = steps.floats("kv_utilization")
        if not np.isnan(utilization).all():
            return utilization
    held = sum(steps.floats(f"kv_{p}_bytes") for p in ("token", "reserved", "internal", "external"))
    return steps.floats("kv_token_bytes") / _zero_as_nan(held)


def _zero_as_nan(values: np.ndarray) -> np.ndarray:
    return np.where(values == 0, np.nan, values)


def _has_steps(run: RunData) -> bool:
    return not run.steps.empty and {"t_s", "num_running", "num_waiting"} <= set(run.steps)


def scheduled_seqs(steps: Columns) -> np.ndarray:
    """Sequences a step ran (prefill + decode): the quantity whose plain mean over steps is
    the summary's `batch_size_mean` (docs/design.md, Metrics). `num_running` also counts
    running sequences the step left out (token budget, chunking); it is the fallback for
    folders without the split."""
    if {"num_prefill_seqs", "num_decode_seqs"} <= set(steps):
        return steps["num_prefill_seqs"] + steps["num_decode_seqs"]
    return steps["num_running"]


def timeline_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Per step: KV utilization (with preemption marks), batch size and waiting queue, a
    panel each; None when no run has steps."""
    runs = [r for r in runset.runs if _has_steps(r)]
    if not runs:
        return None
    fig = subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                   titles=("KV utilization (token / held memory) — × marks preemptions",
                           "batch size: sequences scheduled in the step (its mean is "
                           "batch_size_mean)", "waiting queue (requests)"))
    for run in runs:
        style = styles[run.name]
        util_all, batch_all = _utilization(run.steps), scheduled_seqs(run.steps)
        steps, rows = _thin(run.steps, [util_all, batch_all, run.steps["num_waiting"]])
        t = steps.floats("t_s")
        line = {"color": style.color, "dash": style.dash, "width": 1.6}
        stepped = {**line, "shape": "hv"}
        panels = ((util_all[rows], {"line": line}, "util %{y:.1%}"),
                  (batch_all[rows], {"showlegend": False, "line": stepped,
                                     "customdata": steps["num_running"]},
                   "scheduled %{y} of %{customdata} running"),
                  (steps["num_waiting"], {"showlegend": False, "line": stepped}, "waiting %{y}"))
        for row, (y, extra, hover) in enumerate(panels, start=1):
            fig.add({"type": "scatter", "x": t, "y": y, "mode": "lines", "name": run.name,
                     "legendgroup": run.name, **extra,
                     "hovertemplate": f"t=%{{x:.2f}}s {hover}<extra>%{{fullData.name}}</extra>"},
                    row=row, col=1)
    marks = 0
    for run in runs:  # after the lines, so the legend lists runs first
        if "preemptions" not in run.steps:
            continue
        preempted = run.steps["preemptions"]
        at, counts = peak_rows(preempted, MAX_MARKS)
        if not at.size:
            continue
        marks += 1
        # Beyond MAX_MARKS steps with preemptions, a mark stands for its stretch of steps.
        where = "" if at.size == np.count_nonzero(preempted) else " in this stretch"
        hit = run.steps.take(at)
        fig.add({
            "type": "scatter", "x": hit["t_s"], "y": _utilization(hit),
            "mode": "markers", "name": f"preemption ({run.name})",
            "legendgroup": "preemption", "showlegend": False,
            "marker": {"symbol": "x", "size": 9, "color": styles[run.name].color,
                       "line": {"width": 1, "color": "#222"}},
            "text": [f"{run.name}: {n} preempted{where}" for n in counts.tolist()],
            "hovertemplate": "t=%{x:.2f}s %{text}<extra></extra>",
        }, row=1, col=1)
    if marks:  # one legend entry in a neutral colour: each run's marks take the run's colour
        fig.add({"type": "scatter", "x": [None], "y": [None], "mode": "markers",
                 "name": "preemption", "legendgroup": "preemption",
                 "marker": {"symbol": "x", "size": 9, "color": "#555"}}, row=1, col=1)
    fig.update_axes("y", {"tickformat": ".0%", "range": [0, 1.05]}, row=1, col=1)
    fig.update_axes("y", {"rangemode": "tozero"}, row=2, col=1)
    fig.update_axes("y", {"rangemode": "tozero"}, row=3, col=1)
    fig.update_axes("x", {"title": {"text": "time since the run started (s)"}}, row=3, col=1)
    fig.update_layout(**base_layout("Timelines", 640))
    return fig


def memory_timeline_figure(runset: RunSet) -> Figure | None:
    """The memory split over time, one panel per run (stacked, share of the arena)."""
    runs = [r for r in runset.runs if _has_steps(r) and "kv_token_bytes" in r.steps]
    runs = runs[:MAX_MEMORY_PANELS]
    if not runs:
        return None
    fig = subplots(rows=len(runs), cols=1, shared_xaxes=True,
                   vertical_spacing=0.1 / max(len(runs), 1) + 0.02,
                   titles=[r.name for r in runs])
    for row, run in enumerate(runs, start=1):
        steps = run.steps
        arena = _zero_as_nan(sum(steps.floats(f"kv_{p}_bytes")
                                 for p in ("token", "reserved", "internal", "external", "free")))
        shares: dict[str, np.ndarray] = {}
        for part in PART_COLORS:
            if f"kv_{part}_bytes" not in steps:
                continue
            values = steps.floats(f"kv_{part}_bytes")
            if part == "free" and "kv_cached_bytes" in steps:
                values = values - steps.floats("kv_cached_bytes")
            shares[part] = values / arena
        shown, rows = _thin(steps, list(shares.values()))
        t = shown["t_s"]
        for part, share in shares.items():
            color = PART_COLORS[part]
            fig.add({
                "type": "scatter", "x": t, "y": share[rows], "mode": "lines",
                "stackgroup": f"g{row}", "line": {"width": 0.5, "color": color},
                "fillcolor": color, "name": PART_TITLES[part], "legendgroup": part,
                "showlegend": row == 1,
                "hovertemplate": f"{PART_TITLES[part]}: %{{y:.1%}}<extra>{run.name}</extra>",
            }, row=row, col=1)
        fig.update_axes("y", {"range": [0, 1], "tickformat": ".0%"}, row=row, col=1)
    fig.update_axes("x", {"title": {"text": "time since the run started (s)"}},
                    row=len(runs), col=1)
    fig.update_layout(**base_layout("KV memory split over time", 130 + 170 * len(runs)))
    return fig


def _caches_prefixes(strategy: str | None) -> bool:
    """Whether the recorded strategy shares cached prompt blocks: its registry entry (a
    variant's base) takes the `namespace` that keys the blocks' hashes."""
    if strategy is None:
        return False
    try:
        entry = STRATEGIES.get(strategy)
        options = STRATEGIES.get(entry.base).options if entry.base else entry.options
    except KvbenchInputError:  # a folder from a kvbench with a strategy this one lacks
        return False
    return "namespace" in {f.name for f in fields(options)}


def _is_prefix_run(run: RunData) -> bool:
    rate = run.summary.scheduler.prefix_hit_rate
    return bool(rate) or _caches_prefixes(run.summary.strategy)


def hit_rate_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Cumulative prefix-cache hit rate (cached prompt tokens / prompt tokens) over time."""
    fig = Figure()
    for run in runset.runs:
        req = run.requests
        need = {"cached_prompt_tokens", "prompt_len"}
        if not _is_prefix_run(run) or req.empty or not need <= set(req):
            continue
        when = "admitted_s" if "admitted_s" in req else "arrival_s"
        at_s = req.floats(when)
        order = np.flatnonzero(~np.isnan(at_s))
        if not order.size:
            continue
        # numpy's default sort, as pandas' `sort_values` (its order of requests admitted at
        # one instant: the curve's steps between them)
        order = order[np.argsort(at_s[order])]
        with np.errstate(divide="ignore", invalid="ignore"):  # (no prompt token yet: NaN)
            rate = (np.cumsum(req.floats("cached_prompt_tokens")[order])
                    / np.cumsum(req.floats("prompt_len")[order]))
        rows = extreme_rows([rate], MAX_POINTS)  # one point per request: a long trace has millions
        fig.add({"type": "scatter", "x": at_s[order][rows], "y": rate[rows],
                 "mode": "lines", "name": run.name,
                 "line": {"color": styles[run.name].color, "dash": styles[run.name].dash,
                          "shape": "hv"},
                 "hovertemplate": "t=%{x:.2f}s hit rate so far %{y:.1%}<extra>"
                                  "%{fullData.name}</extra>"})
    if not fig.data:
        return None
    fig.update_layout(**base_layout("Prefix-cache hit rate over time (cumulative)", 340,
                                    yaxis={"tickformat": ".0%", "rangemode": "tozero"},
                                    xaxis={"title": {"text": "admission time (s)"}}))
    return fig
