"""Charts of what each engine step cost and produced: step time against batch size, and
output throughput over the run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import RunStyle, base_layout
from kvbench.report.timelines import scheduled_seqs
from kvbench.report.token_times import token_times

MAX_POINTS = 1500  # per run: keeps the page light on long runs
THROUGHPUT_BINS = 40


def _step_columns(run: RunData) -> bool:
    need = {"t_s", "step_ms", "num_prefill_seqs", "num_decode_seqs"}
    return not run.steps.empty and need <= set(run.steps)


def _sample(frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) <= MAX_POINTS:
        return frame
    keep = np.linspace(0, len(frame) - 1, MAX_POINTS).round().astype(int)
    return frame.iloc[np.unique(keep)]


def step_time_figure(runset: RunSet, styles: dict[str, RunStyle]) -> go.Figure | None:
    """Step time against the sequences the step ran: decode-only steps as dots with their
    median per batch size as a line (the cost of one more sequence in the batch), steps
    holding a prefill as open circles (their cost follows prompt tokens, not sequences)."""
    runs = [r for r in runset.runs if _step_columns(r)]
    if not runs:
        return None
    fig = go.Figure()
    for run in runs:
        style = styles[run.name]
        steps = run.steps.assign(batch=scheduled_seqs(run.steps))
        decode = steps[steps["num_prefill_seqs"] == 0]
        prefill = steps[steps["num_prefill_seqs"] > 0]
        if not decode.empty:
            median = decode.groupby("batch")["step_ms"].median()
            fig.add_scatter(x=median.index, y=median.to_numpy(), mode="lines+markers",
                            name=run.name, legendgroup=run.name,
                            line={"color": style.color, "dash": style.dash, "width": 2},
                            marker={"size": 5},
                            hovertemplate="%{x} sequences: median %{y:.2f} ms per decode step"
                                          "<extra>%{fullData.name}</extra>")
            shown = _sample(decode)
            fig.add_scatter(x=shown["batch"], y=shown["step_ms"], mode="markers",
                            name=f"{run.name} decode steps", legendgroup=run.name,
                            showlegend=False, opacity=0.35,
                            marker={"color": style.color, "size": 5},
                            hovertemplate="decode step: %{x} sequences, %{y:.2f} ms<extra>"
                                          "%{fullData.name}</extra>")
        if not prefill.empty:
            shown = _sample(prefill)
            fig.add_scatter(x=shown["batch"], y=shown["step_ms"], mode="markers",
                            name=f"{run.name} steps with a prefill", legendgroup=run.name,
                            showlegend=decode.empty,
                            marker={"color": style.color, "size": 7, "symbol": "circle-open"},
                            customdata=shown.get("num_prefill_tokens"),
                            hovertemplate="step with prefill: %{x} sequences, %{y:.2f} ms, "
                                          "%{customdata} prompt tokens<extra>"
                                          "%{fullData.name}</extra>")
    fig.update_layout(**base_layout(
        "Step time vs batch size (dots: decode-only steps, line: their median; "
        "circles: steps with a prefill)", 400,
        xaxis={"title": "sequences scheduled in the step", "rangemode": "tozero"},
        yaxis={"title": "step time (ms)", "rangemode": "tozero"}))
    return fig


def _tokens_from_steps(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """(time, output tokens) per step: every decode samples one token, and so does a prefill
    that reaches the end of its prompt; with chunked prefill a prompt's earlier chunks count
    too (an overestimate, named in the chart)."""
    if not _step_columns(run):
        return None
    steps = run.steps
    end_s = steps["t_s"].astype(float) + steps["step_ms"].astype(float) / 1e3
    tokens = (steps["num_decode_seqs"] + steps["num_prefill_seqs"]).astype(float)
    return end_s.to_numpy(), tokens.to_numpy()


def _tokens_per_s(times: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    counts, _ = np.histogram(times, bins=edges, weights=weights)
    return counts / np.diff(edges)


def throughput_timeline_figure(runset: RunSet,
                               styles: dict[str, RunStyle]) -> tuple[go.Figure, str] | None:
    """Output tokens per second in 40 equal windows of each run's span, from `tokens.jsonl`
    when the folder has it, else from the steps. Returns the figure and where its counts
    came from."""
    fig = go.Figure()
    sources = set()
    for run in runset.runs:
        samples = token_times(run.path)
        if samples:
            times = np.concatenate(samples) if samples else np.empty(0)
            weights = np.ones_like(times)
            sources.add("tokens.jsonl")
        else:
            found = _tokens_from_steps(run)
            if found is None:
                continue
            times, weights = found
            sources.add("steps.csv")
        if times.size == 0:
            continue
        edges = np.linspace(0.0, float(times.max()) or 1.0, THROUGHPUT_BINS + 1)
        rate = _tokens_per_s(times, weights, edges)
        style = styles[run.name]
        fig.add_scatter(x=edges[:-1], y=rate, mode="lines", line_shape="hv", name=run.name,
                        legendgroup=run.name,
                        line={"color": style.color, "dash": style.dash, "width": 2},
                        hovertemplate="from t=%{x:.2f}s: %{y:.1f} tok/s<extra>"
                                      "%{fullData.name}</extra>")
    if not fig.data:
        return None
    fig.update_layout(**base_layout(
        "Output throughput over time", 360,
        xaxis={"title": "time since the run started (s)", "rangemode": "tozero"},
        yaxis={"title": "output tokens / s", "rangemode": "tozero"}))
    return fig, " and ".join(sorted(sources))
