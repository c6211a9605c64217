"""`RequestTable`: `requests.csv`'s rows as numpy columns, built from the run's sequences,
the latencies with vLLM's definitions (docs/design.md, Metrics; results/README.md documents
each column)."""

from __future__ import annotations

import operator
from collections.abc import Sequence as Seq
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.csv_table import csv_text

if TYPE_CHECKING:
    import pandas as pd

REQUEST_COLUMNS = (
    "request_id", "sample", "arrival_s", "sent_s", "client_wait_ms", "prompt_len",
    "output_len", "n", "admitted_s", "first_token_s", "finish_s", "queue_ms", "prefill_ms",
    "ttft_ms", "tpot_ms", "e2e_ms", "preemptions", "cached_prompt_tokens", "output_tokens",
    "completed", "host_load_ms", "prefill_compute_ms",
)
_INT_COLUMNS = ("request_id", "sample", "prompt_len", "output_len", "n", "preemptions",
                "cached_prompt_tokens", "output_tokens")
_TIMES = ("arrival_s", "sent_s", "admitted_s", "first_token_s", "finish_s")
# Not a column: when a sample's KV arrived from a host tier (`host_load_ms` ends there).
_LOADED = "kv_loaded_s"
# The latency columns: (name, the time it starts from, the time it ends at).
_LATENCIES = (("client_wait_ms", "arrival_s", "sent_s"), ("queue_ms", "sent_s", "admitted_s"),
              ("prefill_ms", "admitted_s", "first_token_s"),
              ("ttft_ms", "sent_s", "first_token_s"), ("tpot_ms", "first_token_s", "finish_s"),
              ("e2e_ms", "sent_s", "finish_s"))
# Rows written to a file at once.
_CHUNK_ROWS = 1 << 16


class _Unstarted:
    """What a row reads of a sample that never started (the run stopped first)."""

    admitted_s = kv_loaded_s = first_token_s = finish_s = None
    token_ids = ()
    prompt_len = preemptions = cached_prompt_tokens = 0


_UNSTARTED = _Unstarted()
# `Request.prompt_len` and `Sequence.num_generated` are properties (a Python call each):
# read here as what they compute, `len(prompt_token_ids)` and `len(token_ids) - prompt_len`.
_OF_REQUEST = operator.attrgetter("request_id", "arrival_s", "prompt_token_ids", "output_len",
                                  "n")
_OF_SAMPLE = operator.attrgetter("admitted_s", "first_token_s", "finish_s", "token_ids",
                                 "prompt_len", "preemptions", "cached_prompt_tokens",
                                 "kv_loaded_s")


def _rows_of(requests: Seq[Request], samples: dict[int, list[Sequence]],
             ) -> tuple[list[Request], list[Any], list[int], list[Any]]:
    """Each row's request, sample (a sequence, or `_UNSTARTED`), sample index and send time
    (the request as the runner sent it: its `arrival_s` is the send time, later than the
    workload's arrival when the client waited for a `--max-concurrency` slot)."""
    row_request: list[Request] = []
    row_seq: list[Any] = []
    sample: list[int] = []
    sent: list[Any] = []
    for request in requests:
        ran = samples.get(request.request_id) or []
        found = {s.sample_index: s for s in ran}
        sent_s = ran[0].request.arrival_s if ran else None
        for index in range(request.n):
            row_request.append(request)
            row_seq.append(found.get(index, _UNSTARTED))
            sample.append(index)
            sent.append(sent_s)
    return row_request, row_seq, sample, sent


class RequestTable:
    """The rows of `requests.csv` (`REQUEST_COLUMNS`), one per sample of each request, as
    numpy columns: int64, float64 (NaN where a time or latency is missing) and bool
    (`completed`), the dtypes pandas reads the file back with."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns
        self.num_rows = len(columns["request_id"])

    @classmethod
    def build(cls, requests: Seq[Request], samples: dict[int, list[Sequence]]) -> RequestTable:
        """The rows of `requests` (`samples` holds their sequences)."""
        row_request, row_seq, sample, sent = _rows_of(requests, samples)
        if not row_request:
            return cls.empty()
        request_id, arrival, prompt_ids, output_len, n = zip(
            *map(_OF_REQUEST, row_request), strict=True)
        admitted, first, finish, token_ids, seq_prompt_len, preemptions, cached, loaded = zip(
            *map(_OF_SAMPLE, row_seq), strict=True)
        generated = np.array(list(map(len, token_ids)), dtype=np.int64) \
            - np.array(seq_prompt_len, dtype=np.int64)
        times = {name: np.array(values, dtype=np.float64)  # (None is NaN)
                 for name, values in zip(_TIMES, (arrival, sent, admitted, first, finish),
                                         strict=True)}
        columns: dict[str, np.ndarray] = {
            "request_id": np.array(request_id, dtype=np.int64),
            "sample": np.array(sample, dtype=np.int64),
            "prompt_len": np.array(list(map(len, prompt_ids)), dtype=np.int64),
            "output_len": np.array(output_len, dtype=np.int64),
            "n": np.array(n, dtype=np.int64),
            "preemptions": np.array(preemptions, dtype=np.int64),
            "cached_prompt_tokens": np.array(cached, dtype=np.int64),
            "output_tokens": generated,
            "completed": np.array([t is not None for t in finish], dtype=bool),
            **times,
        }
        for name, a, b in _LATENCIES:
            columns[name] = (times[b] - times[a]) * 1e3
        # TTFT's three parts: queue_ms, then host_load_ms (admission to the end of the load
        # it waited for; 0 for a sample that waited for none), then prefill_compute_ms (the
        # rest to the first token): queue + host_load + prefill_compute = ttft, and
        # host_load + prefill_compute = prefill.
        loaded_s = np.array(loaded, dtype=np.float64)
        admitted_s = times["admitted_s"]
        waited = ~np.isnan(loaded_s)
        with np.errstate(invalid="ignore"):
            columns["host_load_ms"] = np.where(waited, (loaded_s - admitted_s) * 1e3,
                                               np.where(np.isnan(admitted_s), np.nan, 0.0))
            columns["prefill_compute_ms"] = (
                times["first_token_s"] - np.where(waited, loaded_s, admitted_s)) * 1e3
        # TPOT: the time after the first token over the tokens after it; none for one token.
        after_first = generated - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            columns["tpot_ms"] = np.where(
                after_first > 0,
                (times["finish_s"] - times["first_token_s"]) / after_first * 1e3, np.nan)
        return cls({name: columns[name] for name in REQUEST_COLUMNS})

    @classmethod
    def empty(cls) -> RequestTable:
        return cls({name: np.empty(0, dtype=np.int64 if name in _INT_COLUMNS else
                                   bool if name == "completed" else np.float64)
                    for name in REQUEST_COLUMNS})

    @classmethod
    def concat(cls, tables: list[RequestTable]) -> RequestTable:
        """The rows of `tables`, one after another."""
        if not tables:
            return cls.empty()
        return cls({name: np.concatenate([t.columns[name] for t in tables])
                    for name in REQUEST_COLUMNS})

    def take(self, order: np.ndarray) -> RequestTable:
        """Rows `order`."""
        return RequestTable({name: values[order] for name, values in self.columns.items()})

    def frame(self) -> pd.DataFrame:
        import pandas as pd  # (a run's own summary and report read `columns_table`)

        return pd.DataFrame(self.columns, columns=list(REQUEST_COLUMNS))

    def write_csv(self, handle: IO[bytes]) -> None:
        """Write `requests.csv` to the binary `handle`, `_CHUNK_ROWS` rows at a time."""
        for start in range(0, max(self.num_rows, 1), _CHUNK_ROWS):
            rows = self.take(slice(start, start + _CHUNK_ROWS))
            handle.write(csv_text(rows.columns, header=start == 0))
