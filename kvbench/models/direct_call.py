"""Modules whose call is their `forward`, without `nn.Module.__call__`'s hook checks: fixed work
on every call, comparable at batch 1 to the small tensor op a module wraps. kvbench's decoders
register no hooks and need none."""

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
