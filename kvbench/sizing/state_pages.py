"""A state-space hybrid's KV pool as vLLM lays it out: one page size for attention and state.

docs/estimate.md ("State-space hybrids") gives the layout: vLLM raises the attention block
until one attention layer's page holds one recurrent layer's state (`MambaSpec`, padded to
the page: `Platform._align_hybrid_block_size`), then groups the layers as for sliding windows
(`kvbench.core.kv_allocation`) into one pool whose block is a page of `group_size` layers; a
request holds cdiv(tokens, block) blocks per attention group and one per state group
(`mamba_cache_mode` "none"). tests/vllm_oracle/test_state_block_size.py calls vLLM's own
function on the published configs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kvbench.core.kv_allocation import PAD_TO_LARGEST_RATIO
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.sizing.vllm_kv_cache import VllmKVPool, no_memory, too_long

# FlashAttention's kernel block sizes, MultipleOf(16) (vllm/v1/attention/backends/flash_attn.py
# `get_supported_kernel_block_sizes`): the alignment of the raised block on CUDA.
KERNEL_BLOCK_ALIGNMENT = 16


@dataclass(frozen=True)
class StatePages:
    """A hybrid's unified pages on one GPU (every byte count exact)."""

    attention_layers: int
    state_layers: int
    mixer: str  # the recurrent layers' kind ("gated_deltanet", "mamba2")
    attention_bytes_per_layer_token: int  # one attention layer's K and V for one token
    kv_bytes_per_token: int  # every attention layer's
    state_bytes_per_layer: int  # one recurrent layer's state for one sequence, unpadded
    state_bytes_per_sequence: int  # every recurrent layer's
    block_size: int  # the attention block size, as vLLM raises it
    given_block_size: int  # --block-size before the raise
    page_bytes: int  # one layer's page: block_size x attention bytes of a token
    group_size: int  # layers per KV cache group (layers per block)
    attention_groups: int
    state_groups: int

    @property
    def block_bytes(self) -> int:
        """One block of the shared pool: a page of every layer of one group."""
        return self.page_bytes * self.group_size

    @property
    def num_groups(self) -> int:
        return self.attention_groups + self.state_groups

    @property
    def padding_layers(self) -> int:
        return (self.num_groups * self.group_size - self.attention_layers
                - self.state_layers)

    @property
    def state_padding_bytes(self) -> int:
        """What padding one layer's state to a page wastes."""
        return self.page_bytes - self.state_bytes_per_layer

    @property
    def state_bytes_held(self) -> int:
        """The pool's bytes one request's states hold: its state groups' blocks."""
        return self.state_groups * self.block_bytes

    def blocks_per_request(self, tokens: int) -> int:
        return self.attention_groups * -(-tokens // self.block_size) + self.state_groups

    def bytes_per_request(self, tokens: int) -> int:
        return self.blocks_per_request(tokens) * self.block_bytes

    def max_requests(self, budget_bytes: int, tokens: int) -> int:
        """Whole requests of `tokens` tokens the pool of `budget_bytes` holds at once."""
        return budget_bytes // self.block_bytes // self.blocks_per_request(tokens)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "block_bytes": self.block_bytes,
                "padding_layers": self.padding_layers,
                "state_padding_bytes": self.state_padding_bytes}


# FlashInfer's Gated DeltaNet prefill exports the state at multiples of 64 tokens inside a
# prefill (vllm/v1/attention/backends/gdn_attn.py `FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`): in
# `align` mode vLLM makes the block a multiple of it (`_align_hybrid_block_size`: lcm with
# `get_mamba_prefill_checkpoint_alignment`), on CUDA Hopper where FlashInfer's kernel is
# chosen. Mamba-2 layers declare none.
GDN_CHECKPOINT_ALIGNMENT = 64


def checkpoint_alignment(model: ModelConfig, mamba_cache_mode: str) -> int:
    """The alignment a `--mamba-cache-mode` adds to the raised block (1: none): `align`'s
    FlashInfer checkpoints for Gated DeltaNet; `all`'s, the scan's chunk (vLLM's first
    mamba prefix caching rounded the block up to a multiple of `mamba_chunk_size`, so that
    every block boundary is a chunk boundary of the kernels, whose states they write)."""
    hybrid = model.hybrid
    if hybrid is None or mamba_cache_mode == "none":
        return 1
    if mamba_cache_mode == "all":
        return hybrid.recurrent.chunk_size
    return GDN_CHECKPOINT_ALIGNMENT if hybrid.recurrent.kind == "gated_deltanet" else 1


def raised_block_size(state_page: int, attention_page_per_token: int,
                      block_size: int, checkpoint_alignment: int = 1) -> int:
    """vLLM's `_align_hybrid_block_size`: the smallest aligned block whose attention page
    holds a state page (`block_size` itself where it already does); `checkpoint_alignment`
    is `align` mode's (`checkpoint_alignment`)."""
    align = math.lcm(max(KERNEL_BLOCK_ALIGNMENT, block_size), checkpoint_alignment)
    raised = align * -(-state_page // (align * attention_page_per_token))
    raised = KERNEL_BLOCK_ALIGNMENT * -(-raised // KERNEL_BLOCK_ALIGNMENT)
    return max(block_size, raised)


def state_pages(model: ModelConfig, kv_element_bytes: int, model_element_bytes: int,
                tensor_parallel_size: int = 1, block_size: int = 16,
                checkpoint_alignment: int = 1) -> StatePages:
    """`model`'s unified pages (a hybrid: `ModelConfig.hybrid`) at these dtypes: the KV
    cache's for attention, the model's for the states (vLLM's `mamba_cache_dtype` auto)."""
    attention = model.kv_groups(kv_element_bytes, tensor_parallel_size)
    states = model.state_groups(model_element_bytes, tensor_parallel_size)
    if len(attention) != 1 or attention[0].attention != "full":
        raise KvbenchInputError(
            f"model {model.name}: a hybrid whose attention layers are not all full attention "
            "is not sized (vLLM would need one page for windows, latents and states)")
    kv, state = attention[0], states[0]
    per_token = kv.bytes_per_layer_token
    block = raised_block_size(state.state_bytes_per_layer, per_token, block_size,
                              checkpoint_alignment)
    counts = (kv.num_layers, state.num_layers)
    group_size = min(counts)
    if max(counts) < min(counts) * PAD_TO_LARGEST_RATIO:
        group_size = max(counts)
    return StatePages(
        attention_layers=kv.num_layers, state_layers=state.num_layers,
        mixer=state.attention, attention_bytes_per_layer_token=per_token,
        kv_bytes_per_token=kv.bytes_per_token,
        state_bytes_per_layer=state.state_bytes_per_layer,
        state_bytes_per_sequence=state.state_bytes_per_sequence,
        block_size=block, given_block_size=block_size, page_bytes=block * per_token,
        group_size=group_size, attention_groups=-(-kv.num_layers // group_size),
        state_groups=-(-state.num_layers // group_size))


def state_pages_rows(pages: StatePages) -> list[tuple[str, str, str]]:
    """`kvbench estimate`'s rows for the pages: (quantity, value, formula)."""
    raised = ("raised from --block-size " f"{pages.given_block_size}"
              if pages.block_size != pages.given_block_size else "as given")
    return [
        ("state per sequence", f"{pages.state_bytes_per_sequence:,} B",
         f"{pages.state_layers} {pages.mixer} layers x {pages.state_bytes_per_layer:,} B "
         "(conv + recurrent state)"),
        ("KV per token", f"{pages.kv_bytes_per_token:,} B",
         f"{pages.attention_layers} attention layers x "
         f"{pages.attention_bytes_per_layer_token:,} B"),
        ("attention block size", f"{pages.block_size:,} tokens",
         f"{raised}: align x cdiv(state page, align x attention page of a token), "
         f"align = max({KERNEL_BLOCK_ALIGNMENT}, --block-size)"),
        ("unified page size", f"{pages.page_bytes:,} B",
         f"block size x {pages.attention_bytes_per_layer_token:,} B; the state padded by "
         f"{pages.state_padding_bytes:,} B"),
        ("KV cache groups", f"{pages.attention_groups} attention + {pages.state_groups} state",
         f"groups of {pages.group_size} layers"
         + (f", {pages.padding_layers} padding layer(s)" if pages.padding_layers else "")),
        ("block of the pool", f"{pages.block_bytes:,} B", f"page x {pages.group_size} layers"),
    ]


def state_pool(pages: StatePages, available: int, max_model_len: int) -> VllmKVPool:
    """vLLM's pool of a hybrid on one GPU with `available` bytes (> 0)."""
    return VllmKVPool(pages.block_size, pages.page_bytes, pages.group_size, pages.num_groups,
                      pages.padding_layers, available // pages.block_bytes,
                      pages.blocks_per_request(max_model_len), max_model_len)


def state_refusal(pages: StatePages, available: int, max_model_len: int,
                  spent: str = "") -> str | None:
    """vLLM's reason not to start a hybrid (None: it starts), as `refusal` words it."""
    if available <= 0:
        return no_memory(available, spent)
    return too_long(pages.bytes_per_request, available, max_model_len, "KV cache and state")
