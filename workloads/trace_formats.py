"""Which trace format a file holds (from its content, not its name: docs/workloads.md, Public
trace formats), and reading it into requests: kvbench JSONL (`trace.py`), Mooncake JSONL
(`mooncake.py`), Azure and BurstGPT CSV (`csv_trace.py`), ShareGPT JSON (`sharegpt_json.py`).

Every reader returns requests in file order with arrival times relative to the trace's first
request; the CSV readers (millions of rows) a `TraceTable` of them (`trace_table.py`).
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.workloads import mooncake, sharegpt_json
from kvbench.workloads.csv_trace import AZURE, BURSTGPT, csv_header, load_csv_table
from kvbench.workloads.trace import load_trace
from kvbench.workloads.trace_rows import MAX_LINE_BYTES, not_a_trace
from kvbench.workloads.trace_table import TraceTable

# A file named so holds JSON lines: a line that is a list is a bad line, not a ShareGPT dataset.
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


def _first_line(path: Path) -> bytes:
    """The first non-blank line (at most `MAX_LINE_BYTES` of it, byte-order mark dropped),
    b'' for an empty or unreadable file."""
    try:
        with path.open("rb") as data:
            while raw := data.readline(MAX_LINE_BYTES + 1):
                if raw.strip():
                    return raw.removeprefix(codecs.BOM_UTF8).strip()
    except OSError:
        pass
    return b""


def _is_text(line: bytes) -> bool:
    """No NUL byte and UTF-8 in its first 64 KiB (a multi-byte character cut there is fine)."""
    head = line[: 1 << 16]
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return b"\0" not in head


def detect_trace_format(path: str | os.PathLike[str]) -> str:
    """kvbench, mooncake, azure, burstgpt or sharegpt-json; a first line that is binary, or
    neither JSON nor a CSV header, is refused; a JSON object that is not Mooncake's is read as
    kvbench JSONL (which explains what is wrong with it)."""
    path = Path(path)
    first = _first_line(path)
    if not first:
        return "kvbench"  # missing or empty: the reader says which
    if not _is_text(first):
        raise not_a_trace(path, "binary data")
    if first.startswith(b"[") and path.suffix.lower() not in JSON_LINES_SUFFIXES:
        return "sharegpt-json"
    if first.startswith(b"{"):
        try:
            obj = json.loads(first.decode("utf-8"))
        except (ValueError, RecursionError):
            return "kvbench"
        return "mooncake" if isinstance(obj, dict) and mooncake.looks_like_mooncake(obj) \
            else "kvbench"
    if first.startswith(b"["):
        return "kvbench"
    header = csv_header(path)
    if set(AZURE.columns) <= set(header):
        return "azure"
    if set(BURSTGPT.columns[1:]) <= set(header):
        return "burstgpt"
    if len(header) > 1 and path.suffix.lower() == ".csv":
        raise KvbenchInputError(
            f"{path}: CSV with columns {', '.join(header)} is not a known trace (Azure LLM "
            "inference: TIMESTAMP,ContextTokens,GeneratedTokens; BurstGPT: Timestamp,Model,"
            "Request tokens,Response tokens,...)"
        )
    raise not_a_trace(path, "its first line is neither a JSON object or list nor a known CSV "
                            "header")


def read_trace(path: str | os.PathLike[str], num_requests: int | None, seed: int,
               vocab_size: int, tokenizer: str | os.PathLike[str] | None = None,
               max_model_len: int | None = None) -> list[Request]:
    """The trace's requests in file order, whatever its format; prompts given by length are
    built to at most `max_model_len` tokens (`bounds.py`)."""
    source = read_trace_source(path, num_requests, seed, vocab_size, tokenizer, max_model_len)
    return source.requests() if isinstance(source, TraceTable) else source


def read_trace_source(path: str | os.PathLike[str], num_requests: int | None, seed: int,
                      vocab_size: int, tokenizer: str | os.PathLike[str] | None = None,
                      max_model_len: int | None = None) -> list[Request] | TraceTable:
    """What `read_trace` gives, except that a CSV trace (Azure, BurstGPT: millions of rows,
    no sharing) comes as a `TraceTable`, whose requests `load_workload` builds once it
    knows their final fields."""
    path = Path(path)
    kind = detect_trace_format(path)
    if kind == "mooncake":
        return mooncake.load_mooncake(path, num_requests, seed, vocab_size, max_model_len)
    if kind in ("azure", "burstgpt"):
        return load_csv_table(path, AZURE if kind == "azure" else BURSTGPT, num_requests, seed,
                              vocab_size, max_model_len)
    if kind == "sharegpt-json":
        return sharegpt_json.load_sharegpt_json(path, num_requests, vocab_size, tokenizer)
    return load_trace(path, num_requests, seed, vocab_size, max_model_len)
