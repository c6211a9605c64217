"""`uniform`: every request has the same fixed prompt and output length, no sharing.

    prompt_len = 128 tokens, output_len = 128 tokens (exactly; no spread)

The control workload: with no length variance, allocators differ only in how they place and
free memory, not in guessing unknown output lengths. Set `prompt_len` and `output_len` to
sweep sizes."""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.params import check_int
from kvbench.workloads.sampling import TokenSampler, rng_for

SUMMARY = "fixed lengths: every request 128 prompt + 128 output tokens, no sharing"

DEFAULTS = {
    "prompt_len": 128,
    "output_len": 128,
}


def uniform_requests(
    num_requests: int, seed: int, vocab_size: int, *, prompt_len: int, output_len: int
) -> list[Request]:
    prompt_len = check_int("prompt_len", prompt_len)
    output_len = check_int("output_len", output_len)
    prompts = TokenSampler(rng_for(seed, "uniform.tokens"), vocab_size).lazy_rows(
        [prompt_len] * num_requests
    )
    return [
        Request(request_id=i, arrival_s=0.0, prompt_token_ids=prompt, output_len=output_len)
        for i, prompt in enumerate(prompts)
    ]


WORKLOADS.add(WorkloadEntry("uniform", uniform_requests, DEFAULTS, SUMMARY, list_order=70))
