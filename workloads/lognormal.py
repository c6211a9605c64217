"""Requests with lognormal prompt and output lengths given by their means (no sharing).

The generator of every workload that is such a distribution (`sharegpt`, `summarize`): the
workload's module registers `partial(lognormal_requests, "<stream>")` with its defaults.
"""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.workloads.params import check_float
from kvbench.workloads.sampling import TokenSampler, lognormal_lengths, lognormal_mu, rng_for


def lognormal_requests(
    stream: str,
    num_requests: int,
    seed: int,
    vocab_size: int,
    *,
    input_mean: float,
    input_sigma: float,
    output_mean: float,
    output_sigma: float,
) -> list[Request]:
    """`stream` names the seeded random streams (`<stream>.lengths`, `<stream>.tokens`)."""
    input_mean = check_float("input_mean", input_mean, 1.0)
    output_mean = check_float("output_mean", output_mean, 1.0)
    input_sigma = check_float("input_sigma", input_sigma, 0.0)
    output_sigma = check_float("output_sigma", output_sigma, 0.0)

    return lognormal_requests_mu(
        stream, num_requests, seed, vocab_size, lognormal_mu(input_mean, input_sigma),
        input_sigma, lognormal_mu(output_mean, output_sigma), output_sigma,
    )


def lognormal_requests_mu(
    stream: str,
    num_requests: int,
    seed: int,
    vocab_size: int,
    input_mu: float,
    input_sigma: float,
    output_mu: float,
    output_sigma: float,
) -> list[Request]:
    """Lengths ~ round(LogNormal(mu, sigma)) on the log-token scale; parameters already checked."""
    lengths = rng_for(seed, f"{stream}.lengths")
    prompt_lens = lognormal_lengths(lengths, num_requests, input_mu, input_sigma)
    output_lens = lognormal_lengths(lengths, num_requests, output_mu, output_sigma)
    prompts = TokenSampler(rng_for(seed, f"{stream}.tokens"), vocab_size).lazy_rows(prompt_lens)
    return [
        Request(request_id=i, arrival_s=0.0, prompt_token_ids=prompt, output_len=out)
        for i, (prompt, out) in enumerate(zip(prompts, output_lens.tolist(), strict=True))
    ]
