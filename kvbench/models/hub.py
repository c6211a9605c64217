"""Hugging Face model ids (`Qwen/Qwen2.5-7B-Instruct`, a revision after `@` as in
huggingface_hub's `hf://` paths) resolved to a local snapshot folder through huggingface_hub,
as vLLM resolves its `--model`: the hub cache first (HF_HUB_CACHE / HF_HOME), HF_HUB_OFFLINE,
HF_TOKEN for gated or private models. Sizing fetches config.json alone; a run fetches the
weights too."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from kvbench.errors import KvbenchInputError

# huggingface_hub's repo id: `namespace/name`, letters, digits, `-`, `_` and `.`
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?")
# What a run reads from a snapshot (config and tokenizer JSON, safetensors weights): never the
# duplicate .bin / .pth / .gguf copies some repositories also hold.
RUN_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken"]


def is_hub_id(model: str) -> bool:
    """`model` spells a hub id (`org/name` or `org/name@revision`) and is no local path."""
    return HUB_ID.fullmatch(model) is not None and not Path(model).exists()


def split_revision(model: str) -> tuple[str, str | None]:
    """`org/name@revision` -> (`org/name`, `revision`); no `@`: the default branch (None)."""
    repo_id, _, revision = model.partition("@")
    return repo_id, revision or None


def with_revision(model: str, revision: str | None) -> str:
    """`model` with `--revision` folded in (`org/name@revision`), refused unless a hub id."""
    if revision is None:
        return model
    if not is_hub_id(model) or "@" in model:
        raise KvbenchInputError(
            f"--revision {revision}: --model {model} is not a Hugging Face model id without a "
            "revision (org/name)")
    return f"{model}@{revision}"


def hub_folder(model: str, weights: bool = False) -> Path:
    """The local snapshot folder of hub id `model`, holding config.json (and with `weights`
    the safetensors and tokenizer files), fetched into the hub cache unless already there."""
    repo_id, revision = split_revision(model)
    try:
        # huggingface_hub: only for a model id, so that --help and presets never load it
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise KvbenchInputError(
            f"model {model}: a Hugging Face model id needs huggingface_hub "
            "(pip install huggingface_hub), or give a local folder") from None
    # huggingface_hub logs each retry of an unreachable hub; the error below says it in one line
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        if weights:
            return Path(huggingface_hub.snapshot_download(
                repo_id, revision=revision, allow_patterns=RUN_FILES))
        return Path(huggingface_hub.hf_hub_download(
            repo_id, "config.json", revision=revision)).parent
    # (a LocalEntryNotFoundError is also an EntryNotFoundError: caught first)
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled):
        offline = " (HF_HUB_OFFLINE is set)" if huggingface_hub.constants.HF_HUB_OFFLINE else ""
        raise KvbenchInputError(
            f"model {model}: no such folder, not in the Hugging Face cache "
            f"({huggingface_hub.constants.HF_HUB_CACHE}) and the hub cannot be "
            f"reached{offline}; download it where the hub is reachable "
            f"(hf download {repo_id}) or give a local folder") from None
    except errors.RevisionNotFoundError:
        raise KvbenchInputError(f"model {model}: the hub has no revision {revision}") from None
    except errors.EntryNotFoundError:
        raise KvbenchInputError(f"model {model}: the repository has no config.json") from None
    except errors.RepositoryNotFoundError:  # gated models included (GatedRepoError)
        raise KvbenchInputError(
            f"model {model}: no such folder, and no such Hugging Face model or it is private "
            "or gated (set HF_TOKEN to a token that may read it)") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise KvbenchInputError(f"model {model}: cannot fetch it from the hub ({reason})") from None
    finally:
        hub_logger.setLevel(level)
