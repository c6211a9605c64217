"""kvbench JSONL traces: one request per line (keys and rules: docs/workloads.md, JSONL traces).

Every line read is validated before anything is built. Prompts given as `prompt_len` are
seeded random ids keeping the sharing the trace describes: a conversation's later line begins
with its earlier line's prompt, otherwise a `prefix_id` line with the first `prefix_len`
tokens of one sequence per `prefix_id`. `write_trace` saves any requests so, to replay exactly."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads.bounds import check_workload_fits, prompt_cap
from kvbench.workloads.sampling import TokenSampler, rng_for
from kvbench.workloads.trace_rows import RowError, count, read_rows, seconds


class _Line(NamedTuple):
    arrival_s: float | None
    prompt_len: int
    prompt_tokens: tuple[int, ...] | None
    output_len: int
    n: int
    prefix_id: str | None
    prefix_len: int
    conversation_id: str | None


def _int(obj: dict[str, Any], key: str, minimum: int) -> int | None:
    return None if obj.get(key) is None else count(obj[key], key, minimum, text_ok=False)


def _name(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
        raise RowError(f"{key} must be a string or an integer, got {json.dumps(value)}")
    return None if value is None else str(value)


def _parse_line(obj: Any, vocab_size: int) -> _Line:
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {type(obj).__name__}")
    arrival = obj.get("arrival_s")
    arrival = None if arrival is None else seconds(arrival, "arrival_s", text_ok=False)
    prompt_len = _int(obj, "prompt_len", 1)
    tokens = obj.get("prompt_tokens")
    if tokens is not None:
        if not isinstance(tokens, list) or not tokens:
            raise RowError("prompt_tokens must be a non-empty list of token ids")
        for token in tokens:
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
                raise RowError(f"prompt_tokens holds {json.dumps(token)}, not a token id in "
                               f"[0, {vocab_size}) (the model's vocabulary)")
        if prompt_len is not None and prompt_len != len(tokens):
            raise RowError(f"prompt_len {prompt_len} disagrees with the {len(tokens)} "
                           "prompt_tokens")
        tokens, prompt_len = tuple(tokens), len(tokens)
    if prompt_len is None:
        raise RowError("needs prompt_len or prompt_tokens")
    output_len = _int(obj, "output_len", 1)
    if output_len is None:
        raise RowError("needs output_len")
    prefix_id = _name(obj, "prefix_id")
    prefix_len = _int(obj, "prefix_len", 0)
    if prefix_len is not None:
        if prefix_id is None:
            raise RowError("prefix_len needs a prefix_id")
        if prefix_len > prompt_len:
            raise RowError(f"prefix_len {prefix_len} is longer than the prompt ({prompt_len})")
    return _Line(arrival, prompt_len, tokens, output_len, _int(obj, "n", 1) or 1, prefix_id,
                 prefix_len or 0, _name(obj, "conversation_id"))


def load_trace(
    path: str | os.PathLike[str], num_requests: int | None, seed: int, vocab_size: int,
    max_model_len: int | None = None,
) -> list[Request]:
    """The trace's first `num_requests` requests in file order (`request_id` = position),
    every line read validated first.

    A prompt given by length is built to at most `max_model_len` tokens (clipping keeps only
    its head), so a trace of long prompts never holds their unclipped tokens."""
    path = Path(path)
    lines, _ = read_rows(path, lambda obj: _parse_line(obj, vocab_size), num_requests,
                         lambda timed: "arrival_s missing while earlier lines have it" if timed
                         else "arrival_s given while earlier lines have none")
    if not lines:
        raise KvbenchInputError(f"{path}: the trace holds no requests")
    cap = prompt_cap(max_model_len)
    check_workload_fits(sum(line.n for line in lines),
                        sum(min(line.prompt_len, cap) for line in lines), str(path))

    sampler = TokenSampler(rng_for(seed, "trace.tokens"), vocab_size)
    prefixes: dict[str, list[int]] = {}
    histories: dict[str, tuple[int, ...]] = {}
    requests: list[Request] = []
    for line in lines:
        if line.prompt_tokens is not None:
            prompt = line.prompt_tokens
        else:
            if line.conversation_id in histories:
                base = histories[line.conversation_id]
            elif line.prefix_id is not None and line.prefix_len:
                shared = prefixes.setdefault(line.prefix_id, [])
                prefix_len = min(line.prefix_len, cap)
                if len(shared) < prefix_len:
                    shared += sampler.tokens(prefix_len - len(shared))
                base = tuple(shared[:prefix_len])
            else:
                base = ()
            length = min(line.prompt_len, cap)
            base = base[:length]
            prompt = base + tuple(sampler.tokens(length - len(base)))
        if line.conversation_id is not None:
            histories[line.conversation_id] = prompt
        requests.append(Request(len(requests), line.arrival_s or 0.0, prompt, line.output_len,
                                n=line.n, prefix_id=line.prefix_id,
                                conversation_id=line.conversation_id))
    return requests


def trace_line(request: Request) -> dict[str, Any]:
    """One request as a trace line (a JSON-ready dict)."""
    obj: dict[str, Any] = {"arrival_s": request.arrival_s, "prompt_len": request.prompt_len,
                           "output_len": request.output_len}
    if request.n != 1:
        obj["n"] = request.n
    if request.prefix_id is not None:
        obj["prefix_id"] = request.prefix_id
    if request.conversation_id is not None:
        obj["conversation_id"] = request.conversation_id
    obj["prompt_tokens"] = list(request.prompt_token_ids)
    return obj


def write_trace(requests: Sequence[Request], path: str | os.PathLike[str]) -> None:
    """Write the requests as a JSONL trace (atomically: temp file, then rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for request in requests:
                out.write(json.dumps(trace_line(request), separators=(",", ":")) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
