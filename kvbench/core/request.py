"""One request of a workload: what arrives at the engine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """A request whose output length is fixed by the workload (EOS is ignored).

    `n > 1` asks for `n` samples of the same prompt (parallel sampling). `prefix_id` names the
    shared prefix (e.g. system prompt) it starts with and `conversation_id` the conversation it
    belongs to; both are descriptive: sharing is found from the token ids themselves.
    `arrival_s` is when the request reaches the engine: a workload's request has its arrival
    time; the runner sends the engine a copy whose `arrival_s` is its send time, later when
    it waited for a `--max-concurrency` slot (latencies count from there).
    """

    request_id: int
    arrival_s: float
    # a tuple, or a `PromptTokens` whose ids are drawn only when read (kvbench.workloads)
    prompt_token_ids: Sequence[int]
    output_len: int
    n: int = 1
    prefix_id: str | None = None
    conversation_id: str | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def final_kv_len(self) -> int:
        """KV slots one sample of this request fills before it finishes.

        The last output token is sampled but never fed back, so its KV is never written.
        """
        return self.prompt_len + self.output_len - 1
