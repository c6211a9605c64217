"""`summarize`: long prompts, short outputs (prefill-heavy traffic).

    prompt_len ~ round(LogNormal(μ_in,  σ_in  = 0.4)), arithmetic mean 1024 tokens
                 (μ_in  = ln 1024 − 0.4²/2 = 6.851: median 945, 99th percentile ≈ 2,400)
    output_len ~ round(LogNormal(μ_out, σ_out = 0.5)), arithmetic mean 64 tokens
                 (μ_out = ln 64 − 0.5²/2 = 4.034: median 56, 99th percentile ≈ 180)

each at least 1 token, independent. The sizes are in the range of news summarization
(CNN/DailyMail articles run to roughly 800 words and their summaries to roughly 56, See et al.
2017; about 1.3 subword tokens per word), chosen as round numbers rather than fitted: what
matters for the KV cache is that each request holds a large prompt for few decode steps, so
prefill dominates and reservation-based allocators waste little on unknown output lengths.
The prompt spread is kept moderate (σ 0.4) so that most prompts fit a 2,048-token model;
the rest are clipped to the model's maximum length by the loader, which counts them.

Sharing structure: none; every prompt is distinct seeded random token ids in [0, vocab_size).
Arrivals: offline unless an arrival process is applied (`arrivals.py`).
"""

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
