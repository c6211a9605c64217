"""Workloads: deterministic (seeded) lists of requests.

`load_workload` (`load.py`) builds a built-in workload (`WORKLOADS`, `entry.py`: one module
each) or reads a trace file (`trace_formats.py`) into a `WorkloadResult`."""

from kvbench.core.request import Request
from kvbench.workloads.arrivals import ArrivalProcess, apply_arrivals, arrival_times
from kvbench.workloads.bounds import MAX_TRACE_TOKENS, check_workload_fits
from kvbench.workloads.clip import clip_to_max_len
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.load import is_trace, load_workload, parse_workload_params
from kvbench.workloads.result import WorkloadResult
from kvbench.workloads.trace import load_trace, write_trace
from kvbench.workloads.trace_formats import detect_trace_format, read_trace
from kvbench.workloads.trace_rows import TraceRowsSkippedWarning

__all__ = [
    "MAX_TRACE_TOKENS", "WORKLOADS", "ArrivalProcess", "Request", "TraceRowsSkippedWarning",
    "WorkloadEntry", "WorkloadResult", "apply_arrivals", "arrival_times", "check_workload_fits",
    "clip_to_max_len", "detect_trace_format", "is_trace", "load_trace", "load_workload",
    "parse_workload_params", "read_trace", "write_trace",
]
