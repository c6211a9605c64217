"""Modules whose call is their `forward`, without `nn.Module.__call__`'s hook machinery.

A decode step of a small model on the CPU runs a few dozen module calls a layer, and
`nn.Module.__call__` (hook checks, then `forward`) is fixed work on every call, comparable to
the small tensor op it wraps at batch 1. kvbench's decoders register no hooks and never need
them (the transformers engine hooks transformers' own model, not these), so their modules call
`forward` directly. Parameters, buffers, submodules and state-dict names are `nn.Module`'s,
unchanged.
"""

from __future__ import annotations

from torch import nn


class DirectCall(nn.Module):
    """An `nn.Module` whose instances call their own class's `forward` directly (hooks
    registered on them are not run)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.__call__ = cls.forward  # each subclass its own forward, as overridden


class Linear(nn.Linear):
    """`nn.Linear`, called without `nn.Module.__call__`."""

    __call__ = nn.Linear.forward


class Embedding(nn.Embedding):
    """`nn.Embedding`, called without `nn.Module.__call__`."""

    __call__ = nn.Embedding.forward
