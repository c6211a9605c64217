"""`summarize`: long prompts, short outputs (prefill-heavy traffic), no sharing.

    prompt_len ~ round(LogNormal(mean 1024, σ = 0.4))   median 945
    output_len ~ round(LogNormal(mean 64,   σ = 0.5))   median 56

Round numbers in the range of news summarization (CNN/DailyMail, See et al. 2017), not a fit:
prefill dominates, and reserving allocators waste little on unknown output lengths."""

from __future__ import annotations

from functools import partial

from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.lognormal import lognormal_requests

SUMMARY = "long prompts, short outputs: lognormal, mean 1024 in / 64 out tokens"

DEFAULTS = {
    "input_mean": 1024.0,
    "input_sigma": 0.4,
    "output_mean": 64.0,
    "output_sigma": 0.5,
}


WORKLOADS.add(
    WorkloadEntry("summarize", partial(lognormal_requests, "summarize"), DEFAULTS, SUMMARY,
                  list_order=40)
)
