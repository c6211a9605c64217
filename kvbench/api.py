"""`kvbench.generate`: run the engine on your own prompts."""

from __future__ import annotations

import numbers
from typing import Any

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError


def check_token_ids(prompts: list[list[int]], vocab_size: int) -> None:
    """Refuse a prompt token that is not an id of the model's vocabulary, naming where it is
    (the embedding lookup would fail with a bare IndexError)."""
    for i, prompt in enumerate(prompts):
        for j, token in enumerate(prompt):
            if isinstance(token, bool) or not isinstance(token, numbers.Integral) \
                    or not 0 <= token < vocab_size:
                raise KvbenchInputError(
                    f"prompts[{i}][{j}] is {token!r}, not a token id in [0, {vocab_size}) "
                    "(the model's vocabulary)")


def generate(
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    model: str = "tiny",
    strategy: str = "paged",
    batching: str = "continuous",
    dtype: str = "float32",
    **engine_options: Any,
) -> list[list[int]]:
    """Greedy (or `temperature=`) generation of exactly `max_new_tokens` per prompt.

    All prompts are submitted at once and batched by the chosen policy; `engine_options` are
    `EngineConfig` fields (`kv_memory="64MiB"`, `block_size=16`, `reserve="max"`, ...).
    Returns the new token ids of each prompt, in order.
    """
    config = EngineConfig(model=model, strategy=strategy, batching=batching, dtype=dtype,
                          **engine_options)
    built = build_engine(config)
    engine = built.engine
    check_token_ids(prompts, built.model_config.vocab_size)
    requests = [
        Request(request_id=i, arrival_s=0.0, prompt_token_ids=tuple(p), output_len=max_new_tokens)
        for i, p in enumerate(prompts)
    ]
    for request in requests:
        engine.check_request(request)
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    outputs = []
    for request in requests:
        seq = engine.sequences[request.request_id][0]
        outputs.append(seq.token_ids[request.prompt_len :])
    return outputs
