"""The default KV block size, shared by the engine's options, the block strategies and the
sizing estimate."""

from __future__ import annotations

DEFAULT_BLOCK_SIZE = 16  # tokens per KV block: vLLM's default --block-size

__all__ = ["DEFAULT_BLOCK_SIZE"]
