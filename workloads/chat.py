"""`chat`: multi-turn conversations under a few shared system prompts.

    num_system_prompts = 2 of system_prompt_len = 96 tokens; turns_per_conversation = 4
    user_len ~ Uniform{16, …, 64}, output_len ~ Uniform{16, …, 96} tokens a turn

Conversation c runs under system prompt c mod `num_system_prompts` (`prefix_id` `system-<i>`).
Every turn resends the whole history: turn k+1's prompt is turn k's prompt, its answer (seeded
random tokens of its output length, not the model's output, so every strategy sees identical
prompts) and the new user message; the mean prompt is 96 + 40 + 1.5 x 96 = 280 tokens. Turn k
arrives `k * think_time_s` after its conversation starts: a fixed offset, since a workload is
a fixed list and a turn never waits for the previous answer."""

from __future__ import annotations

import math

from kvbench.core.request import Request
from kvbench.workloads.entry import WORKLOADS, WorkloadEntry
from kvbench.workloads.params import check_float, check_int, check_range
from kvbench.workloads.sampling import TokenSampler, rng_for, uniform_lengths

SUMMARY = "multi-turn conversations under 2 shared system prompts; each turn resends the history"

DEFAULTS = {
    "num_system_prompts": 2,
    "system_prompt_len": 96,
    "turns_per_conversation": 4,
    "user_len": (16, 64),
    "output_len": (16, 96),
    "think_time_s": 0.0,
}


def chat_requests(num_requests: int, seed: int, vocab_size: int, *, num_system_prompts: int,
                  system_prompt_len: int, turns_per_conversation: int, user_len: tuple[int, int],
                  output_len: tuple[int, int], think_time_s: float) -> list[Request]:
    num_system_prompts = check_int("num_system_prompts", num_system_prompts)
    system_prompt_len = check_int("system_prompt_len", system_prompt_len, minimum=0)
    turns = check_int("turns_per_conversation", turns_per_conversation)
    user_len = check_range("user_len", user_len)
    output_len = check_range("output_len", output_len)
    think_time_s = check_float("think_time_s", think_time_s, 0.0)

    num_conversations = math.ceil(num_requests / turns)
    lengths = rng_for(seed, "chat.lengths")
    user_lens = uniform_lengths(lengths, num_conversations * turns, user_len)
    output_lens = uniform_lengths(lengths, num_conversations * turns, output_len)
    user_lens = user_lens.reshape(num_conversations, turns).tolist()
    output_lens = output_lens.reshape(num_conversations, turns).tolist()

    sampler = TokenSampler(rng_for(seed, "chat.tokens"), vocab_size)
    system_prompts = [list(p) for p in sampler.rows([system_prompt_len] * num_system_prompts)]

    requests: list[Request] = []
    for conversation in range(num_conversations):
        system_index = conversation % num_system_prompts
        num_turns = min(turns, num_requests - len(requests))
        users, outputs = user_lens[conversation], output_lens[conversation]
        # The conversation's whole transcript; turn k's prompt is a prefix of it.
        transcript = system_prompts[system_index] + sampler.tokens(
            sum(users[:num_turns]) + sum(outputs[: num_turns - 1]))
        end = system_prompt_len
        for turn in range(num_turns):
            end += users[turn]
            requests.append(Request(len(requests), turn * think_time_s, tuple(transcript[:end]),
                                    outputs[turn], prefix_id=f"system-{system_index}",
                                    conversation_id=f"conv-{conversation}"))
            end += outputs[turn]  # the answer, resent with the next turn
    return requests


WORKLOADS.add(WorkloadEntry("chat", chat_requests, DEFAULTS, SUMMARY, list_order=10))
