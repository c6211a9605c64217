"""Next-token choice: greedy, or temperature sampling seeded per request, sample and position.

Seeding per (seed, request, sample, position) makes a sampled token independent of which
other sequences shared the step, so every strategy and policy produces the same tokens.
"""

from __future__ import annotations

import torch

from kvbench.core.sampling_params import SamplingParams


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    seed: int,
    keys: list[tuple[int, int, int]],
) -> list[int]:
    """One token per logits row; `keys[i]` = (request_id, sample_index, position) of row i.

    Greedy choice (temperature 0) needs no keys.
    """
    if temperature == 0:
        if logits.device.type == "cpu":
            # numpy's argmax (the first maximal index, as torch's) is vectorised over the
            # row; torch's CPU reduction with indices is not.
            return logits.numpy().argmax(axis=1).tolist()
        # max().indices: the same first maximal index as argmax, and faster.
        return logits.max(dim=-1).indices.tolist()
    probs = torch.softmax(logits.float() / temperature, dim=-1).cpu()
    tokens = []
    for row, (request_id, sample_index, position) in zip(probs, keys, strict=True):
        mixed = (seed * 1_000_003 + request_id * 7_919 + sample_index * 104_729 + position)
        generator = torch.Generator().manual_seed(mixed % (2**63 - 1))
        tokens.append(int(torch.multinomial(row, 1, generator=generator)))
    return tokens


def sample_rows(logits: torch.Tensor, params: SamplingParams) -> list[list[int]]:
    """The tokens of every key of `params.keys[i]`, drawn from logits row `i`.

    A row's first key is sampled with the whole batch and any further key (a forked sibling)
    from that row alone, as each was drawn before sampling moved behind the executor.
    """
    firsts = [keys[0] for keys in params.keys]
    greedy = params.temperature == 0
    tokens = sample_tokens(logits, params.temperature, params.seed, [] if greedy else firsts)
    out = []
    for row, (token, keys) in enumerate(zip(tokens, params.keys, strict=True)):
        if greedy:
            out.append([token] * len(keys))
        else:
            out.append([token, *(sample_tokens(logits[row : row + 1], params.temperature,
                                               params.seed, [key])[0] for key in keys[1:])])
    return out
