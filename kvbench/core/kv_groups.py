"""`KVGroup`: layers whose KV cache has one shape, the unit every KV size is counted in.

A model's KV cache is a tuple of groups (`ModelConfig.kv_groups`): one full-attention group,
one sliding-window group per window length, or one "mla" group (multi-head latent attention,
DeepSeek-V2/V3). `kvbench estimate`, the tensor-parallel capacity, the engine's bytes per
slot and the KV arena's tensors are all sized from the groups. A new group kind is its name
in `ATTENTION_KINDS` and its branch of `bytes_per_layer_token` (and of `slot_shape` for a
layout other than one K and one V `[slots, KV heads, head dim]` tensor per layer); running
it also needs its attention kernels.

A state-space hybrid's recurrent layers are a "state" group (`kind`, `state_group`,
`ModelConfig.state_groups`): constant bytes per sequence, none per token. They are kept out of
`ModelConfig.kv_groups` (whose sum is KV per token), and sized beside them by
`kvbench.sizing.state_pages`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

# "full": every layer attends to the whole context, K and V per KV head.
# "sliding": as "full", to its last `window` tokens only.
# "mla": multi-head latent attention; one 'head' per token and layer holding the normalised
# latent (`value_dim` = kv_lora_rank wide) then the roped shared key: head_dim = kv_lora_rank
# + qk_rope_head_dim (576 for DeepSeek-V3). Its value is the latent itself (the first
# `value_dim` elements), so there is no separate V.
ATTENTION_KINDS = ("full", "sliding", "mla")
# A "state" group (`kind`) holds a recurrent layer's state: constant bytes per sequence
# (`state_bytes_per_layer`), none per token; its `attention` names the mixer, one of
# STATE_MIXERS (kvbench.models.recurrent: Gated DeltaNet, Mamba-2).
GROUP_KINDS = ("attention", "state")
STATE_MIXERS = ("gated_deltanet", "mamba2")


@dataclass(frozen=True)
class KVGroup:
    """The KV cache of `layers` (model layer indices), one `attention` kind and shape.

    `window` is the tokens a layer attends back (None: the whole context, as for "full").
    `value_dim` is an "mla" group's latent width, the part of its one tensor read as the
    value (0 for "full": V is its own tensor).

    A `kind` "state" group is a hybrid's recurrent layers: no KV heads, no bytes per token,
    `state_bytes_per_layer` per sequence and layer (conv state + recurrent state, as vLLM's
    `MambaSpec` sizes them), whatever the sequence's length.
    """

    layers: tuple[int, ...]
    num_kv_heads: int
    head_dim: int
    element_bytes: int  # bytes per stored K or V element (1 for fp8, 2 for bf16)
    attention: str = "full"
    window: int | None = None
    value_dim: int = 0
    kind: str = "attention"
    state_bytes_per_layer: int = 0

    def __post_init__(self) -> None:
        if self.kind not in GROUP_KINDS:
            raise ValueError(f"unknown KV group kind {self.kind!r} (known: {GROUP_KINDS})")
        if self.kind == "state":
            if self.attention not in STATE_MIXERS or self.state_bytes_per_layer < 1 or (
                    self.num_kv_heads or self.head_dim):
                raise ValueError("a state group names its mixer and holds bytes per sequence, "
                                 "no KV heads")
            return
        if self.state_bytes_per_layer:
            raise ValueError("an attention group holds no state")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(
                f"unknown KV group kind {self.attention!r} (known: {', '.join(ATTENTION_KINDS)})"
            )
        if self.attention == "full" and self.window is not None:
            raise ValueError("a full-attention KV group has no window")
        if self.attention == "sliding" and (self.window is None or self.window < 1):
            raise ValueError("a sliding-window KV group needs a window of at least one token")
        if self.attention == "mla" and not (
                self.num_kv_heads == 1 and 0 < self.value_dim < self.head_dim):
            raise ValueError("an mla KV group has one head whose value is a prefix of it")

    @property
    def is_state(self) -> bool:
        return self.kind == "state"

    @property
    def state_bytes_per_sequence(self) -> int:
        """One sequence's state across the group's layers (0 for an attention group)."""
        return self.num_layers * self.state_bytes_per_layer

    @property
    def separate_v(self) -> bool:
        """Whether a layer holds a V tensor beside K ("full"), or reads V off K ("mla")."""
        return self.attention != "mla"

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def bytes_per_layer_token(self) -> int:
        """One token's KV in one layer of the group: K and V, each KV heads x head dim; for
        "mla" the one latent-and-rope row; none for a state group."""
        if self.is_state:
            return 0
        tensors = 2 if self.separate_v else 1
        return tensors * self.num_kv_heads * self.head_dim * self.element_bytes

    @property
    def bytes_per_token(self) -> int:
        """One token's KV across the group's layers."""
        return self.num_layers * self.bytes_per_layer_token

    @property
    def slot_shape(self) -> tuple[int, int]:
        """The shape of one token slot of one layer's K tensor (and of its V tensor; "mla":
        of its one tensor, `(1, kv_lora_rank + rope dim)`)."""
        return (self.num_kv_heads, self.head_dim)

    def sharded(self, tensor_parallel_size: int) -> KVGroup:
        """The group as one GPU of a tensor-parallel group holds it: 1/N of the KV heads.

        An "mla" group is whole on every GPU: its one latent serves every query head, and
        each GPU's share of the heads reads all of it (as vLLM holds it under TP). A state
        group's shape under TP is its model's to say (`ModelConfig.state_groups`).
        """
        if self.is_state:
            raise ValueError("a state group is built per tensor-parallel size, not sharded")
        if not self.separate_v:
            return self
        return replace(self, num_kv_heads=self.num_kv_heads // tensor_parallel_size)

    def formula(self) -> str:
        """`bytes_per_token` in words, as `kvbench estimate` prints it (a state group: its
        bytes per sequence)."""
        if self.is_state:
            return (f"{self.num_layers} {self.attention} layers x "
                    f"{self.state_bytes_per_layer:,} B state a sequence")
        if not self.separate_v:
            return (
                f"{self.num_layers} layers x ({self.value_dim} latent + "
                f"{self.head_dim - self.value_dim} rope) x {self.element_bytes} B"
            )
        return (
            f"2 (K,V) x {self.num_layers} layers x {self.num_kv_heads} KV heads x "
            f"{self.head_dim} head dim x {self.element_bytes} B"
        )


def full_attention_group(
    num_layers: int, num_kv_heads: int, head_dim: int, element_bytes: int
) -> KVGroup:
    """One full-attention group over layers 0 .. num_layers - 1."""
    return KVGroup(tuple(range(num_layers)), num_kv_heads, head_dim, element_bytes)


def mla_group(
    num_layers: int, kv_lora_rank: int, rope_dim: int, element_bytes: int
) -> KVGroup:
    """One latent-attention group over layers 0 .. num_layers - 1: a row of kv_lora_rank +
    rope_dim elements per token and layer."""
    return KVGroup(tuple(range(num_layers)), 1, kv_lora_rank + rope_dim, element_bytes,
                   attention="mla", value_dim=kv_lora_rank)


def state_group(layers: tuple[int, ...], mixer: str, state_bytes_per_layer: int) -> KVGroup:
    """The recurrent `layers` of a hybrid, `state_bytes_per_layer` each a sequence."""
    return KVGroup(layers, 0, 0, 0, attention=mixer, kind="state",
                   state_bytes_per_layer=state_bytes_per_layer)


def state_bytes_per_sequence(groups: Iterable[KVGroup]) -> int:
    """One sequence's recurrent state across every state group."""
    return sum(group.state_bytes_per_sequence for group in groups)


def kv_bytes_per_token(groups: Iterable[KVGroup]) -> int:
    """One token's KV across every group (every layer of the model)."""
    return sum(group.bytes_per_token for group in groups)

