"""`GroupMemory`: each KV group's part of the memory split over a run, and KV held per token.

A strategy with one table for every layer (`paged`, `prefix`, `contiguous` without windows)
holds the same slots in every model KV group, so a group's bytes are the split's slots x the
group's bytes per token, derived once at the end. `hybrid` (and `contiguous` on a windowed
model, a ring per window group) keeps a split per allocation group (`MemorySplit.groups`),
each slot `group_size` layers' bytes; its free slots are the shared pool's and belong to no
group. Means are weighted by step duration (docs/design.md, Memory
split).

*KV held per token* is the mean held bytes over the mean computed tokens of the sequences
holding memory: what one token of context costs under the strategy.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from kvbench.strategies.base import MemorySplit

PARTS = ("token", "reserved", "internal", "external", "free")


@dataclass(frozen=True)
class GroupShape:
    """One group the report shows: `window` None for full attention."""

    layers: tuple[int, ...]
    window: int | None
    bytes_per_slot: int  # bytes of one of the split's slots in this group


class GroupMemory:
    """Step-duration-weighted sums of the split, total and per group; `add` once a step."""

    def __init__(self, shapes: tuple[GroupShape, ...], bytes_per_slot: int,
                 per_group_splits: bool) -> None:
        self.shapes = shapes
        self.bytes_per_slot = bytes_per_slot
        self.per_group_splits = per_group_splits
        self.reset()

    def reset(self) -> None:
        self._weight_s = 0.0
        self._held_s = 0.0
        self._tokens_s = 0.0
        self._total = [0.0] * len(PARTS)  # slot-seconds of the whole split
        self._groups = [[0.0] * len(PARTS) for _ in self.shapes]
        self._held_max = [0] * len(self.shapes)

    def add(self, dt_s: float, split: MemorySplit) -> None:
        tokens = split.sequence_tokens if split.sequence_tokens is not None else split.token
        self.add_parts(dt_s, split.token, split.reserved, split.internal, split.external,
                       split.free, tokens)
        if self.per_group_splits:  # one split per allocation group
            for sums, part, g in zip(self._groups, split.groups, range(len(self.shapes)),
                                     strict=False):
                sums[0] += dt_s * part.token
                sums[1] += dt_s * part.reserved
                sums[2] += dt_s * part.internal
                if part.held > self._held_max[g]:
                    self._held_max[g] = part.held

    def add_parts(self, dt_s: float, token: int, reserved: int, internal: int, external: int,
                  free: int, sequence_tokens: int | None = None) -> None:
        """`add` of a split given by its parts (a fast-forwarded decode step: no
        `MemorySplit` is built for it); `sequence_tokens`: the computed tokens of the
        sequences holding memory, when they are not the split's `token`. A strategy with a
        split per group adds the groups' parts itself (`add`)."""
        held = token + reserved + internal + external
        self._weight_s += dt_s
        self._held_s += dt_s * held
        self._tokens_s += dt_s * (token if sequence_tokens is None else sequence_tokens)
        total = self._total
        total[0] += dt_s * token
        total[1] += dt_s * reserved
        total[2] += dt_s * internal
        total[3] += dt_s * external
        total[4] += dt_s * free
        if not self.per_group_splits and self._held_max and held > self._held_max[0]:
            self._held_max = [held] * len(self.shapes)

    def add_run(self, dts_s: list[float], tokens: list[int], held: list[int], will: list[int],
                external: int, num_slots: int) -> None:
        """`add_parts` of each step of a run of decode steps (a strategy with one split), from
        each step's duration, computed tokens, held slots and slots that will be used: each
        sum over the run taken at once (the same sums, added in another order)."""
        if self.per_group_splits:
            raise ValueError("a decode run has no per-group splits to record")
        mul = operator.mul
        reserved = list(map(operator.sub, will, tokens))
        internal = list(map(operator.sub, held, will))
        free = [num_slots - h - external for h in held]
        weight = sum(dts_s)
        self._weight_s += weight
        self._held_s += sum(map(mul, dts_s, held)) + weight * external
        tokens_s = sum(map(mul, dts_s, tokens))
        self._tokens_s += tokens_s
        total = self._total
        total[0] += tokens_s
        total[1] += sum(map(mul, dts_s, reserved))
        total[2] += sum(map(mul, dts_s, internal))
        total[3] += weight * external
        total[4] += sum(map(mul, dts_s, free))
        most = max(held) + external
        if self._held_max and most > self._held_max[0]:
            self._held_max = [most] * len(self.shapes)

    def summary(self) -> dict[str, Any]:
        """`kv_held_bytes_per_token` and `kv_groups` of the summary's memory section."""
        w = self._weight_s
        per_token = (self._held_s * self.bytes_per_slot / self._tokens_s
                     if self._tokens_s > 0 else None)
        groups = []
        for g, shape in enumerate(self.shapes):
            b = shape.bytes_per_slot
            sums = self._groups[g] if self.per_group_splits else self._total
            means = {f"{p}_bytes_mean": (sums[i] * b / w if w > 0 else None)
                     for i, p in enumerate(PARTS)}
            if self.per_group_splits:
                means["free_bytes_mean"] = None  # the pool's, shared: in the total only
            groups.append({
                "attention": "full" if shape.window is None else "sliding",
                "window": shape.window,
                "num_layers": len(shape.layers),
                "bytes_per_slot": b,
                **means,
                "held_bytes_max": self._held_max[g] * b,
            })
        return {"kv_held_bytes_per_token": per_token, "kv_groups": groups}


__all__ = ["GroupMemory", "GroupShape"]
