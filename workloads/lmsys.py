"""`lmsys`: LMSYS-Chat-1M-like lengths (Zheng et al. 2023), lognormal on the log-token scale.

    prompt_len ~ round(LogNormal(μ = 6.03, σ = 1.00))   median 416, mean 685 tokens
    output_len ~ round(LogNormal(μ = 4.93, σ = 0.84))   median 138, mean 197 tokens

The log-scale figures kvbench's workload spec gives, used as given (not re-derived from the
dataset). Longer prompts and shorter answers than `sharegpt`; no sharing."""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.lognormal import lognormal_requests_mu
from kvbench.workloads.params import check_float

SUMMARY = "LMSYS-Chat-1M-like lengths: lognormal, log-scale μ/σ 6.03/1.00 in, 4.93/0.84 out"

DEFAULTS = {
    "input_mu": 6.03,
    "input_sigma": 1.00,
    "output_mu": 4.93,
    "output_sigma": 0.84,
}


def lmsys_requests(
    num_requests: int,
    seed: int,
    vocab_size: int,
    *,
    input_mu: float,
    input_sigma: float,
    output_mu: float,
    output_sigma: float,
) -> list[Request]:
    input_mu = check_float("input_mu", input_mu, 0.0)
    output_mu = check_float("output_mu", output_mu, 0.0)
    input_sigma = check_float("input_sigma", input_sigma, 0.0)
    output_sigma = check_float("output_sigma", output_sigma, 0.0)

    return lognormal_requests_mu(
        "lmsys", num_requests, seed, vocab_size, input_mu, input_sigma, output_mu, output_sigma
    )


WORKLOADS.add(WorkloadEntry("lmsys", lmsys_requests, DEFAULTS, SUMMARY, list_order=30))
