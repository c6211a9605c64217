"""`sharegpt`: prompt and output lengths of real chat traffic (ShareGPT), no download needed.

Kwon et al. (PagedAttention, SOSP 2023, section 6.1 and figure 11) publish only the means on
ShareGPT: 161.31 input and 337.99 output tokens, both long-tailed. The lengths are lognormal
with those arithmetic means and a chosen spread (docs/workloads.md, Published figures):

    prompt_len ~ round(LogNormal(μ_in,  σ_in  = 1.2)),  μ_in  = ln(161.31) − σ_in²/2  = 4.364
    output_len ~ round(LogNormal(μ_out, σ_out = 1.0)),  μ_out = ln(337.99) − σ_out²/2 = 5.323

σ_in = 1.2 puts the median prompt at 79 tokens (mostly short questions, a few pasted
documents), σ_out = 1.0 the median answer at 205. No sharing: prompts are distinct seeded
random token ids.
"""

from __future__ import annotations

from functools import partial

from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.lognormal import lognormal_requests

SUMMARY = "ShareGPT-like lengths: lognormal, mean 161 in / 338 out tokens, heavy tails"

# Kwon et al. 2023 (PagedAttention), ShareGPT: mean input 161.31, mean output 337.99 tokens.
SHAREGPT_MEAN_INPUT = 161.31
SHAREGPT_MEAN_OUTPUT = 337.99

DEFAULTS = {
    "input_mean": SHAREGPT_MEAN_INPUT,
    "input_sigma": 1.2,
    "output_mean": SHAREGPT_MEAN_OUTPUT,
    "output_sigma": 1.0,
}


WORKLOADS.add(
    WorkloadEntry("sharegpt", partial(lognormal_requests, "sharegpt"), DEFAULTS, SUMMARY,
                  list_order=20)
)
