"""kvbench: benchmark and profile LLM inference KV-cache memory management strategies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.execution.threads import default_passive_wait_policy

# Before anything imports torch: its OpenMP runtime reads the wait policy once, when loaded.
default_passive_wait_policy()

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kvbench.api import generate as generate


def __getattr__(name: str) -> Any:
    if name == "generate":
        # the engine imports torch (seconds): `import kvbench` stays cheap until it is used
        from kvbench.api import generate

        return generate
    raise AttributeError(f"module 'kvbench' has no attribute {name!r}")


__all__ = ["generate", "__version__"]
