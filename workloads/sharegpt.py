"""`sharegpt`: prompt and output lengths of real chat traffic (ShareGPT), no download needed.

Published figures (Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention", SOSP 2023, section 6.1 and figure 11): on the ShareGPT dataset the mean
input length is 161.31 tokens and the mean output length 337.99 tokens, both with long right
tails (ShareGPT has 8.4x longer inputs and 5.8x longer outputs than Alpaca).

Only the means are published, so the distributions here are lognormal with those arithmetic
means and a chosen log-scale spread:

    prompt_len ~ round(LogNormal(μ_in,  σ_in  = 1.2)),  μ_in  = ln(161.31) − σ_in²/2  = 4.364
    output_len ~ round(LogNormal(μ_out, σ_out = 1.0)),  μ_out = ln(337.99) − σ_out²/2 = 5.323

each at least 1 token, independent of each other. Why these σ: a lognormal's mean/median ratio
is exp(σ²/2), and its coefficient of variation sqrt(exp(σ²) − 1). σ_in = 1.2 puts the median
prompt at 79 tokens and the 99th percentile near 1,300 (CV 1.8): most chat prompts are short
questions, a few paste whole documents, which is the strongly right-skewed input histogram of
the paper's figure 11. σ_out = 1.0 puts the median answer at 205 tokens and the 99th
percentile near 2,100 (CV 1.3): answers are long-tailed too but less skewed than prompts. With
these σ, about 1.9% of prompt+output pairs exceed 2,048 tokens; those are clipped to the model's
maximum length by the workload loader (see `clip.py`), which counts them.

Sharing structure: none. Every prompt is distinct seeded random token ids in [0, vocab_size)
(the models have random weights, so only lengths matter). Arrivals: offline unless an arrival
process is applied (`arrivals.py`).
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
