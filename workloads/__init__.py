"""Workloads: deterministic (seeded) lists of requests.

`load_workload` (`load.py`) is the one entry point: it builds a built-in workload or reads a
trace file, applies the arrival process (`arrivals.py`) and clipping to the model (`clip.py`)
and returns a `WorkloadResult` (`result.py`). The built-in workloads are the table `WORKLOADS`
of `WorkloadEntry`s (`entry.py`); each workload's module (`chat.py`, `sharegpt.py`, ...)
registers itself there, so a new workload is one new file. The trace formats are in
`trace_formats.py`.
"""

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
