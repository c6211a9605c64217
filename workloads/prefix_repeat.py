"""`prefix-repeat`: K long shared prefixes x distinct suffixes.

    K = num_prefixes = 4 prefixes of prefix_len = 512 tokens each
    suffix_len ~ Uniform{16, …, 64}, output_len ~ Uniform{16, …, 64} tokens

Request i uses prefix i mod K (round-robin) followed by its own random suffix: requests with
the same `prefix_id` share their first `prefix_len` tokens token-for-token and nothing after;
the few-shot / long-instructions / document-QA pattern a prefix cache stores once."""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.params import check_int, check_range
from kvbench.workloads.sampling import TokenSampler, rng_for, uniform_lengths

SUMMARY = "K=4 shared 512-token prefixes x distinct 16-64-token suffixes, round-robin"

DEFAULTS = {
    "num_prefixes": 4,
    "prefix_len": 512,
    "suffix_len": (16, 64),
    "output_len": (16, 64),
}


def prefix_repeat_requests(num_requests: int, seed: int, vocab_size: int, *, num_prefixes: int,
                           prefix_len: int, suffix_len: tuple[int, int],
                           output_len: tuple[int, int]) -> list[Request]:
    num_prefixes = check_int("num_prefixes", num_prefixes)
    prefix_len = check_int("prefix_len", prefix_len)
    suffix_len = check_range("suffix_len", suffix_len, minimum=0)
    output_len = check_range("output_len", output_len)

    lengths = rng_for(seed, "prefix-repeat.lengths")
    suffix_lens = uniform_lengths(lengths, num_requests, suffix_len)
    output_lens = uniform_lengths(lengths, num_requests, output_len)
    sampler = TokenSampler(rng_for(seed, "prefix-repeat.tokens"), vocab_size)
    prefixes = sampler.rows([prefix_len] * num_prefixes)
    suffixes = sampler.rows(suffix_lens)
    return [
        Request(i, 0.0, prefixes[i % num_prefixes] + suffix, out,
                prefix_id=f"prefix-{i % num_prefixes}")
        for i, (suffix, out) in enumerate(zip(suffixes, output_lens.tolist(), strict=True))
    ]


WORKLOADS.add(
    WorkloadEntry("prefix-repeat", prefix_repeat_requests, DEFAULTS, SUMMARY, list_order=50)
)
