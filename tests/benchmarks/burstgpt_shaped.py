"""A seeded trace in BurstGPT's CSV format with BurstGPT-like arrivals and lengths (the machine
has no internet, and the benchmark needs a million rows).

The columns and their meaning are BurstGPT's (`kvbench.workloads.csv_trace` reads them):
`Timestamp` in whole seconds from the trace's start, `Model` (ChatGPT or GPT-4),
`Request tokens`, `Response tokens`, `Total tokens`, `Log Type` (Conversation log or API log).
The shape follows the published `BurstGPT_1.csv` (HPMLL/BurstGPT, release v1.1: 1,429.7k rows
over its first two months, so about 0.27 requests/s on average; the BurstGPT paper,
arXiv:2401.17644, models its arrivals as bursty Gamma processes and its lengths as
long-tailed):

- arrivals: Gamma inter-arrival times of shape `BURST_SHAPE` (< 1: bursty, a coefficient of
  variation of 1/sqrt(shape)) at `mean_rate_per_s`, floored to whole seconds as the trace
  records them (many requests share a second);
- request tokens: lognormal, median `REQUEST_MEDIAN` tokens, clipped to the trace's range;
- response tokens: lognormal, median `RESPONSE_MEDIAN`, clipped likewise;
- `FAILED_SHARE` of rows are failures (0 response tokens), as in `BurstGPT_1.csv`: the reader
  leaves them out;
- a fifth of the requests are GPT-4, a tenth API logs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MEAN_RATE_PER_S = 1_429_700 / (61 * 86_400)  # BurstGPT_1.csv: its rows over two months
BURST_SHAPE = 0.5
REQUEST_MEDIAN, REQUEST_SIGMA = 600.0, 0.9
RESPONSE_MEDIAN, RESPONSE_SIGMA = 250.0, 0.8
MAX_REQUEST_TOKENS, MAX_RESPONSE_TOKENS = 31_000, 12_000
FAILED_SHARE = 0.02
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
_CHUNK_ROWS = 200_000  # rows formatted at a time: memory stays flat for a million rows


def write_burstgpt_shaped_csv(path: Path, num_rows: int, seed: int = 0,
                              mean_rate_per_s: float = MEAN_RATE_PER_S) -> Path:
    """Write `num_rows` rows (failures included) to `path` and return it."""
    rng = np.random.default_rng(seed)
    t_s = 0.0
    with Path(path).open("w") as out:
        out.write(HEADER)
        for start in range(0, num_rows, _CHUNK_ROWS):
            n = min(_CHUNK_ROWS, num_rows - start)
            gaps = rng.gamma(BURST_SHAPE, 1.0 / (BURST_SHAPE * mean_rate_per_s), n)
            times = t_s + np.cumsum(gaps)
            t_s = float(times[-1])
            request = np.clip(rng.lognormal(np.log(REQUEST_MEDIAN), REQUEST_SIGMA, n),
                              1, MAX_REQUEST_TOKENS).astype(np.int64)
            response = np.clip(rng.lognormal(np.log(RESPONSE_MEDIAN), RESPONSE_SIGMA, n),
                               1, MAX_RESPONSE_TOKENS).astype(np.int64)
            response[rng.random(n) < FAILED_SHARE] = 0
            model = np.where(rng.random(n) < 0.2, "GPT-4", "ChatGPT")
            log = np.where(rng.random(n) < 0.1, "API log", "Conversation log")
            out.writelines(
                f"{t},{m},{q},{r},{q + r},{g}\n"
                for t, m, q, r, g in zip(np.floor(times).astype(np.int64).tolist(),
                                         model.tolist(), request.tolist(), response.tolist(),
                                         log.tolist(), strict=True)
            )
    return Path(path)
