"""Clipping requests to the model's maximum length (prompt_len + output_len <= max_model_len).

A request that does not fit loses output tokens first (to at least 1), then its prompt's end:
keeping the head preserves the sharing of system prompts, prefixes and earlier chat turns.
Clipped requests are counted (`WorkloadResult.num_clipped`, `clip_message`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError


def clip_to_max_len(
    requests: Sequence[Request], max_model_len: int | None
) -> tuple[list[Request], int]:
    """The requests shortened to fit `max_model_len`, and how many had to be shortened."""
    if max_model_len is None:
        return list(requests), 0
    check_max_model_len(max_model_len)
    clipped: list[Request] = []
    num_clipped = 0
    for request in requests:
        if request.prompt_len + request.output_len <= max_model_len:
            clipped.append(request)
            continue
        num_clipped += 1
        output_len = max(1, max_model_len - request.prompt_len)
        prompt = request.prompt_token_ids[: max_model_len - output_len]
        clipped.append(replace(request, prompt_token_ids=prompt, output_len=output_len))
    return clipped, num_clipped


def clip_lengths(prompt_len: np.ndarray, output_len: np.ndarray, max_model_len: int | None,
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """`clip_to_max_len` of requests given as length columns (a CSV trace's table): the
    prompt and output lengths shortened by the same rule, and how many were."""
    if max_model_len is None:
        return prompt_len, output_len, 0
    check_max_model_len(max_model_len)
    clipped = prompt_len + output_len > max_model_len
    num_clipped = int(np.count_nonzero(clipped))
    if num_clipped:
        short_output = np.maximum(1, max_model_len - prompt_len)
        output_len = np.where(clipped, short_output, output_len)
        prompt_len = np.where(clipped, np.minimum(prompt_len, max_model_len - output_len),
                              prompt_len)
    return prompt_len, output_len, num_clipped


def check_max_model_len(max_model_len: object) -> None:
    """Refuse a maximum length that is not an integer >= 2 (one prompt, one output token)."""
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2:
        raise KvbenchInputError(
            f"--max-model-len must be an integer >= 2 (one prompt and one output token), "
            f"got {max_model_len!r}"
        )


def clip_message(num_clipped: int, num_requests: int, max_model_len: int) -> str:
    return (
        f"{num_clipped} of {num_requests} requests clipped to --max-model-len {max_model_len} "
        f"(output shortened first, then the prompt's end)"
    )
