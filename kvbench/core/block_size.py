"""The default KV block size, shared by the engine's options, the block strategies and the
sizing estimate."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError

DEFAULT_BLOCK_SIZE = 16  # tokens per KV block: vLLM's default --block-size


def check_block_size(block_size: int) -> None:
    """A block holds a power of two tokens (the kernels and the block pool rely on it)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 \
            or block_size & (block_size - 1):
        raise KvbenchInputError(f"--block-size must be a power of two, got {block_size}")

