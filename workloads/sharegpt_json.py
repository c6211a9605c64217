"""vLLM's ShareGPT dataset (`ShareGPT_V3_unfiltered_cleaned_split.json`), tokenized locally.

As `vllm bench serve --dataset-name sharegpt`: each entry of two turns or more is a request,
the first turn's text the prompt, the second's token count the output length, counted by the
tokenizer in `--tokenizer DIR` (local files). Unlike vLLM, entries are taken in file order and
its length filters are not applied; entries that tokenize to nothing are skipped
(docs/workloads.md, ShareGPT JSON)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError, optional_import
from kvbench.workloads.trace_rows import check_not_empty, warn_skipped


def load_tokenizer(folder: str | os.PathLike[str] | None, path: Path) -> Any:
    """The Hugging Face tokenizer saved in `folder` (local files only)."""
    if folder is None:
        raise KvbenchInputError(
            f"{path}: a ShareGPT JSON dataset needs --tokenizer DIR (a Hugging Face tokenizer "
            "folder, e.g. the model's) to count its tokens"
        )
    folder = Path(folder)
    if not folder.is_dir():
        raise KvbenchInputError(f"--tokenizer {folder}: not a folder")
    transformers = optional_import("transformers", f"--tokenizer {folder}")
    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the user's folder
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise KvbenchInputError(
            f"--tokenizer {folder}: not a Hugging Face tokenizer folder ({reason[:200]})"
        ) from None


def _first_exchange(entry: Any, index: int, path: Path) -> tuple[str, str] | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise KvbenchInputError(
            f"{path}: entry {index} is not an object with a \"conversations\" list"
        )
    turns = entry["conversations"]
    if len(turns) < 2:
        return None
    texts = []
    for turn in turns[:2]:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise KvbenchInputError(
                f"{path}: entry {index}: each turn needs a \"value\" string"
            )
        texts.append(turn["value"])
    return texts[0], texts[1]


def load_sharegpt_json(
    path: Path,
    num_requests: int | None,
    vocab_size: int,
    tokenizer: str | os.PathLike[str] | None,
) -> list[Request]:
    tok = load_tokenizer(tokenizer, path)
    try:
        entries = json.loads(path.read_bytes())
    except OSError as exc:
        raise KvbenchInputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KvbenchInputError(f"{path}: not a valid JSON file ({exc})") from None
    except RecursionError:
        raise KvbenchInputError(f"{path}: JSON nested too deeply") from None
    if not isinstance(entries, list):
        raise KvbenchInputError(f"{path}: a ShareGPT dataset is a JSON list of conversations")

    requests: list[Request] = []
    skipped = 0
    batch = 256  # tokenized together: fast tokenizers encode a list in one call
    for start in range(0, len(entries), batch):
        if num_requests is not None and len(requests) >= num_requests:
            break
        pairs = [_first_exchange(entries[i], i, path)
                 for i in range(start, min(start + batch, len(entries)))]
        skipped += pairs.count(None)
        pairs = [pair for pair in pairs if pair is not None]
        if not pairs:
            continue
        prompts = tok([p for p, _ in pairs]).input_ids
        outputs = tok([c for _, c in pairs]).input_ids
        for prompt, output in zip(prompts, outputs, strict=True):
            if num_requests is not None and len(requests) >= num_requests:
                break
            if not prompt or not output:
                skipped += 1
                continue
            requests.append(Request(len(requests), 0.0, tuple(t % vocab_size for t in prompt),
                                    len(output)))
    check_not_empty(path, len(requests))
    warn_skipped(path, skipped, len(requests), "fewer than two turns, or empty text")
    return requests
