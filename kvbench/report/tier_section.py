"""The report's "Host KV tier" section: one row per run that kept a host tier (`--kv-offload`),
from its summary's `scheduler` keys (`kvbench/results/tier_figures.py`), and TTFT's mean as
queue + host load + prefill compute; below it, how a tiered run's preempted requests came
back (recomputed, or swapped out and loaded). Empty when no run kept one (docs/offload.md).
"""

from __future__ import annotations

from typing import Any

from kvbench.report.runs import RunSet
from kvbench.report.tables import table_html
from kvbench.units import format_bytes

HEADERS = ("run", "hit rate: GPU", "host", "total", "stored", "loaded", "loads / step",
           "requests that loaded", "load wait mean", "load wait p90",
           "TTFT mean", "= queue", "+ host load", "+ prefill compute", "host blocks",
           "evictions")


def _rate(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def tier_rows(runset: RunSet) -> list[list[str]]:
    """The section's cells, one row per run with a host tier."""
    rows = []
    for run in runset.runs:
        sched = run.summary.scheduler
        if sched is None or sched.get("host_blocks") is None:
            continue
        wait = sched.get("host_load_wait_ms") or {}
        latency = run.summary.latency_ms
        rows.append([
            run.name, _rate(sched.get("gpu_hit_rate")), _rate(sched.get("host_hit_rate")),
            _rate(sched.get("prefix_hit_rate")),
            format_bytes(sched.get("host_stored_bytes")),
            format_bytes(sched.get("host_loaded_bytes")),
            "-" if sched.get("host_loaded_blocks_per_step") is None
            else f"{sched.get('host_loaded_blocks_per_step'):.2f}",
            str(sched.get("host_load_requests") or 0), _ms(wait.get("mean")), _ms(wait.get("p90")),
            _ms(latency.ttft.mean if latency else None),
            _ms(latency.queue.mean if latency else None),
            _ms(latency.host_load.mean if latency else None),
            _ms(latency.prefill_compute.mean if latency else None),
            f"{sched.get('host_blocks'):,}", f"{sched.get('host_evictions') or 0:,}",
        ])
    return rows


SWAP_HEADERS = ("run", "preemption mode", "preemptions", "swapped out", "recomputed instead",
                "swapped out: copied", "swapped in", "swapped in: loaded", "swap-in wait mean",
                "swap-in wait p90", "TTFT mean", "TPOT mean")


def swap_rows(runset: RunSet) -> list[list[str]]:
    """One row per run with a host tier that preempted: how its victims came back."""
    rows = []
    for run in runset.runs:
        sched = run.summary.scheduler
        if sched is None or sched.get("host_blocks") is None or not sched.get("preemptions"):
            continue
        wait = sched.get("swap_in_wait_ms") or {}
        latency = run.summary.latency_ms
        rows.append([
            run.name, str(sched.get("preemption_mode") or "recompute"),
            f"{sched.get('preemptions'):,}", f"{sched.get('host_swap_out_requests') or 0:,}",
            f"{sched.get('host_swap_fallbacks') or 0:,}",
            format_bytes(sched.get("swap_out_bytes") or 0),
            f"{sched.get('host_swap_in_requests') or 0:,}",
            format_bytes(sched.get("swap_in_bytes") or 0),
            _ms(wait.get("mean")), _ms(wait.get("p90")),
            _ms(latency.ttft.mean if latency else None),
            _ms(latency.tpot.mean if latency else None),
        ])
    return rows


def tier_section_html(runset: RunSet) -> str:
    rows = tier_rows(runset)
    if not rows:
        return ""
    swaps = swap_rows(runset)
    return table_html(HEADERS, rows) + (table_html(SWAP_HEADERS, swaps) if swaps else "")
