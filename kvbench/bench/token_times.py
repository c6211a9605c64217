"""`tokens.jsonl`: every output token's time, one line per sample of a request.

Kept so that per-request inter-token latencies (vLLM's `itls`, `std_itl_ms`) can be rebuilt
from a results folder. One JSON object a line:
`{"request_id": 3, "sample": 0, "token_times_s": [0.512301, 0.530112, ...]}`, times on the
run's clock (the clock of `requests.csv`'s `arrival_s`), rounded to the microsecond.
See results/README.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError

TOKENS_FILE = "tokens.jsonl"


def token_time_lines(requests: Iterable[Request],
                     sequences: dict[int, list[Sequence]]) -> list[str]:
    """One compact JSON line per sample of each request, in request order."""
    lines = []
    for request in requests:
        for seq in sorted(sequences.get(request.request_id, []), key=lambda s: s.sample_index):
            # numpy rounds a whole list at once: half the CPU of round() per token at 10k
            # requests (issue 15).
            times = np.round(np.asarray(seq.token_times_s, dtype=float), 6).tolist()
            lines.append(json.dumps({"request_id": request.request_id,
                                     "sample": seq.sample_index, "token_times_s": times},
                                    separators=(",", ":")))
    return lines


def read_token_times(folder: Path) -> dict[int, list[list[float]]] | None:
    """request id -> each sample's token times (seconds); None when the folder has no file
    (written by an older kvbench)."""
    path = Path(folder) / TOKENS_FILE
    if not path.is_file():
        return None
    out: dict[int, list[list[float]]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            times = [float(t) for t in row["token_times_s"]]
            out.setdefault(int(row["request_id"]), []).append(times)
        except (ValueError, KeyError, TypeError) as err:
            raise KvbenchInputError(f"cannot read {path} line {number}: {err}") from None
    return out


def token_gaps_s(times: list[float]) -> list[float]:
    """Every gap between consecutive output tokens of one sample (docs/design.md, ITL)."""
    return [b - a for a, b in zip(times, times[1:], strict=False)]


__all__ = ["TOKENS_FILE", "read_token_times", "token_gaps_s", "token_time_lines"]
