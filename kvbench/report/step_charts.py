"""Charts of what each engine step cost and produced: step time against batch size, and
output throughput over the run."""

from __future__ import annotations

import numpy as np

from kvbench.report.figure import Figure, subplots
from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import RunStyle, base_layout
from kvbench.report.thinning import even_rows
from kvbench.report.timelines import MAX_POINTS, scheduled_seqs

THROUGHPUT_BINS = 40


def _step_columns(run: RunData) -> bool:
    need = {"t_s", "step_ms", "num_prefill_seqs", "num_decode_seqs"}
    return not run.steps.empty and need <= set(run.steps)


def _sample(rows: np.ndarray) -> np.ndarray:
    """At most MAX_POINTS of the step indices `rows`, evenly spread."""
    return rows[even_rows(rows.size, MAX_POINTS)]


def _medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `keys`, ascending, and the median of each one's `values`, as pandas'
    group median: a NaN key is no group, a NaN value is skipped (a group of NaN only: NaN)."""
    keys, values = np.asarray(keys), np.asarray(values, dtype=np.float64)
    if keys.dtype.kind == "f":
        keep = ~np.isnan(keys)
        keys, values = keys[keep], values[keep]
    if not keys.size:
        return keys, values
    order = np.lexsort((values, keys))  # (a group's NaN values last)
    keys, values = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.add.reduceat((~np.isnan(values)).astype(np.int64), starts)
    low = values[starts + np.maximum(counts - 1, 0) // 2]
    high = values[starts + counts // 2 - (counts == 0)]
    return keys[starts], np.where(counts > 0, (low + high) / 2, np.nan)


def step_time_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Left: decode-only steps' time against the sequences they ran, dots with their median
    per batch size as a line (its slope is what one more sequence costs). Right: steps that
    hold a prefill, against the tokens they ran (their cost follows prompt tokens)."""
    runs = [r for r in runset.runs if _step_columns(r)]
    if not runs:
        return None
    fig = subplots(rows=1, cols=2, horizontal_spacing=0.08, titles=(
        "decode-only steps: time vs sequences (line: median)",
        "steps with a prefill: time vs tokens in the step"))
    for run in runs:
        style = styles[run.name]
        # Columns as arrays and steps as indices: filtering the frame would copy every column
        # of a long run's steps.
        steps = run.steps
        batch = scheduled_seqs(steps)
        step_ms = steps.floats("step_ms")
        prefills = steps["num_prefill_seqs"]
        decode = np.flatnonzero(prefills == 0)
        prefill = np.flatnonzero(prefills > 0)
        if decode.size:
            sizes, medians = _medians(batch[decode], step_ms[decode])
            fig.add({"type": "scatter", "x": sizes, "y": medians,
                     "mode": "lines+markers", "name": run.name, "legendgroup": run.name,
                     "line": {"color": style.color, "dash": style.dash, "width": 2},
                     "marker": {"size": 5},
                     "hovertemplate": "%{x} sequences: median %{y:.2f} ms per decode step"
                                      "<extra>%{fullData.name}</extra>"}, row=1, col=1)
            shown = _sample(decode)
            fig.add({"type": "scatter", "x": batch[shown], "y": step_ms[shown],
                     "mode": "markers",
                     "name": f"{run.name} decode steps", "legendgroup": run.name,
                     "showlegend": False, "opacity": 0.35,
                     "marker": {"color": style.color, "size": 5},
                     "hovertemplate": "decode step: %{x} sequences, %{y:.2f} ms<extra>"
                                      f"{run.name}</extra>"}, row=1, col=1)
        if prefill.size and "num_batched_tokens" in steps:
            shown = _sample(prefill)
            fig.add({"type": "scatter", "x": steps["num_batched_tokens"][shown],
                     "y": step_ms[shown], "mode": "markers",
                     "name": f"{run.name} prefill steps" if decode.size else run.name,
                     "legendgroup": run.name, "showlegend": not decode.size,
                     "marker": {"color": style.color, "size": 7, "symbol": "circle-open",
                                "line": {"width": 1.5}},
                     "customdata": batch[shown],
                     "hovertemplate": "%{x} tokens, %{customdata} sequences: %{y:.1f} ms"
                                      f"<extra>{run.name}</extra>"}, row=1, col=2)
    fig.update_axes("x", {"title": {"text": "sequences scheduled in the step"},
                          "rangemode": "tozero"}, row=1, col=1)
    fig.update_axes("x", {"title": {"text": "tokens in the step (prompt + decode)"},
                          "rangemode": "tozero"}, row=1, col=2)
    fig.update_axes("y", {"title": {"text": "step time (ms)"}, "rangemode": "tozero"},
                    row=1, col=1)
    fig.update_axes("y", {"rangemode": "tozero"}, row=1, col=2)
    fig.update_layout(**base_layout("Step time vs batch size", 400))
    return fig


def _tokens_from_steps(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """(time, output tokens) per step: every decode samples one token, and so does a prefill
    that reaches the end of its prompt; with chunked prefill a prompt's earlier chunks count
    too (an overestimate, named in the chart)."""
    if not _step_columns(run):
        return None
    steps = run.steps
    end_s = steps.floats("t_s") + steps.floats("step_ms") / 1e3
    tokens = (steps["num_decode_seqs"] + steps["num_prefill_seqs"]).astype(float)
    return end_s, tokens


def _tokens_from_times(run: RunData) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(time, tokens at it) from the run's per-token times; None when it has none. A run's own
    (in memory) come as step ends with counts: a million-request run's hundreds of millions
    of tokens are a few million steps."""
    tokens = run.token_times
    if tokens is None:
        return None
    if tokens.in_memory:
        counted = tokens.time_counts()
        kept = counted.counts > 0
        return (counted.values[kept], counted.counts[kept]) if kept.any() else None
    return (tokens.times_s, None) if tokens.times_s.size else None


def _tokens_per_s(times: np.ndarray, weights: np.ndarray | None,
                  edges: np.ndarray) -> np.ndarray:
    # Equal windows given as a count and range: numpy bins them arithmetically (the same
    # counts as searching the edges, without a search per token of a long run).
    counts, _ = np.histogram(times, bins=edges.size - 1, range=(edges[0], edges[-1]),
                             weights=weights)
    return counts / np.diff(edges)


def throughput_timeline_figure(runset: RunSet,
                               styles: dict[str, RunStyle]) -> tuple[Figure, str] | None:
    """Output tokens per second in 40 equal windows spanning the longest run (the same
    windows for every run), from `tokens.parquet` when the folder has it, else from the steps.
    Returns the figure and where its counts came from."""
    found: list[tuple[RunData, np.ndarray, np.ndarray | None]] = []
    sources = set()
    for run in runset.runs:
        from_tokens = _tokens_from_times(run)
        if from_tokens is not None:
            times, weights = from_tokens
            sources.add("tokens.parquet")
        else:
            from_steps = _tokens_from_steps(run)
            if from_steps is None:
                continue
            times, weights = from_steps
            sources.add("steps.csv")
        if times.size:
            found.append((run, times, weights))
    if not found:
        return None
    end_s = max(float(times.max()) for _, times, _ in found) or 1.0
    edges = np.linspace(0.0, end_s, THROUGHPUT_BINS + 1)
    fig = Figure()
    for run, times, weights in found:
        style = styles[run.name]
        fig.add({"type": "scatter", "x": edges[:-1], "y": _tokens_per_s(times, weights, edges),
                 "mode": "lines", "name": run.name, "legendgroup": run.name,
                 "line": {"color": style.color, "dash": style.dash, "width": 2, "shape": "hv"},
                 "hovertemplate": "from t=%{x:.2f}s: %{y:.1f} tok/s<extra>"
                                  "%{fullData.name}</extra>"})
    fig.update_layout(**base_layout(
        "Output throughput over time", 360,
        xaxis={"title": {"text": "time since the run started (s)"}, "rangemode": "tozero"},
        yaxis={"title": {"text": "output tokens / s"}, "rangemode": "tozero"}))
    return fig, " and ".join(sorted(sources))
