"""`parallel`: n samples per prompt (parallel sampling, as for best-of-n or pass@k).

    prompt_len ~ Uniform{64, …, 256}, output_len ~ Uniform{64, …, 256} (the same for all n)
    n = 4 samples per request

`num_requests` counts prompts; the engine generates `n * num_requests` sequences, the n of a
request sharing its whole prompt (a forking strategy stores it once, the others n times)."""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.params import check_int, check_range
from kvbench.workloads.sampling import TokenSampler, rng_for, uniform_lengths

SUMMARY = "n samples per prompt (default n=4): prompt and output 64-256 tokens"

DEFAULTS = {
    "n": 4,
    "prompt_len": (64, 256),
    "output_len": (64, 256),
}


def parallel_requests(num_requests: int, seed: int, vocab_size: int, *, n: int,
                      prompt_len: tuple[int, int], output_len: tuple[int, int]) -> list[Request]:
    n = check_int("n", n)
    prompt_len = check_range("prompt_len", prompt_len)
    output_len = check_range("output_len", output_len)

    lengths = rng_for(seed, "parallel.lengths")
    prompt_lens = uniform_lengths(lengths, num_requests, prompt_len)
    output_lens = uniform_lengths(lengths, num_requests, output_len)
    prompts = TokenSampler(rng_for(seed, "parallel.tokens"), vocab_size).lazy_rows(prompt_lens)
    return [
        Request(request_id=i, arrival_s=0.0, prompt_token_ids=prompt, output_len=out, n=n)
        for i, (prompt, out) in enumerate(zip(prompts, output_lens.tolist(), strict=True))
    ]


WORKLOADS.add(WorkloadEntry("parallel", parallel_requests, DEFAULTS, SUMMARY, list_order=60))
