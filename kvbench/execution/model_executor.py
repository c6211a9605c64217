"""`ModelExecutor`: the real model and kernels on a preallocated KV arena."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from kvbench.core.host_transfers import HostTransfers
from kvbench.core.kv_allocation import HybridAllocation
from kvbench.core.kv_groups import KVGroup
from kvbench.core.layout import KVLayout
from kvbench.core.step_batch import StepBatch
from kvbench.execution.decode_graphs import DecodeGraphs
from kvbench.execution.host_kv_tier import HostCopyStats, HostKVTier
from kvbench.execution.pooled_states import PooledStates, StatePool
from kvbench.execution.step_inputs import DeviceIndices, StepInputs
from kvbench.execution.tensor_executor import TensorExecutor
from kvbench.kernels.attention_ops import AttentionOps
from kvbench.kernels.reference import write_latent
from kvbench.models.llama import LlamaDecoder
from kvbench.tracing import trace_range

# fp8 scales from a layer's first write: amax / FP8_SCALE_TARGET, so that the first write's
# largest value lands at 224, half of e4m3's largest finite value (448): 2x headroom for later
# tokens whose K/V exceed the first prefill's, at the cost of one binade at the small end
# (subnormals start at 2^-6 * scale). The floor keeps an all-zero first write usable.
FP8_SCALE_TARGET = 224.0
FP8_SCALE_FLOOR = 1e-6


class KVArena:
    """One K and one V tensor per layer, shaped by its `KVGroup` (`[num_slots, Hkv, D]`),
    allocated once; a latent-attention ("mla") layer has one `[num_slots, 1, latent + rope]`
    tensor, its V a view of the latent and its scale K's. An fp8 (`float8_e4m3fn`) arena
    holds `value / scale` with one 0-d float32 scale for K and one for V per layer:
    `kv_scale` when given, else set from the layer's first write and never changed, so every
    sequence sees the same scales.

    `state_layers` hold no KV (a state-space hybrid's recurrent layers and Nemotron-H's
    MLP-only layers: `k` and `v` are None there); the recurrent layers' states live in the
    pool's blocks (`pooled_states`).

    With an `allocation` (`hybrid`, `kvbench.core.kv_allocation`) the arena holds one K and
    one V tensor per position in an allocation group, shared by every group: layer l reads
    and writes tensor `tensor_of_layer[l]` through the block tables of its group
    (`layer_group[l]`), and `num_slots` counts pool slots.
    """

    def __init__(
        self,
        groups: Sequence[KVGroup],
        num_slots: int,
        dtype: torch.dtype,
        device,
        kv_scale: float | None = None,
        allocation: HybridAllocation | None = None,
        state_layers: tuple[int, ...] = (),
    ) -> None:
        shapes: dict[int, tuple[int, int, int]] = {
            layer: (num_slots, *group.slot_shape) for group in groups for layer in group.layers
        }
        # layer -> the latent width its V is read from (absent: the layer has its own V)
        latent_values = {layer: group.value_dim for group in groups for layer in group.layers
                         if not group.separate_v}
        num_layers = len(shapes) + len(state_layers)
        covered = sorted([*shapes, *state_layers])
        if covered != list(range(num_layers)) or sum(len(g.layers) for g in groups) != len(
                shapes):
            raise ValueError(f"KV groups and state layers must cover layers 0..n-1 once each, "
                             f"got {covered}")
        self.num_slots = num_slots
        self.dtype = dtype
        self.layer_group = [0] * num_layers
        self.num_table_groups = 1
        if allocation is None:  # a tensor per layer, shaped by its group
            tensor_of_layer = sorted(shapes)
            tensor_shapes = [shapes[i] for i in tensor_of_layer]
            tensor_latent = [latent_values.get(i) for i in tensor_of_layer]
            if len(shapes) != num_layers:  # layers without KV: indices into the tensors
                kv_index = {layer: t for t, layer in enumerate(tensor_of_layer)}
                tensor_of_layer = [kv_index.get(i) for i in range(num_layers)]
            else:
                tensor_of_layer = list(range(num_layers))
        else:  # one slot shape (`hybrid_allocation` checks it); every layer latent, or none
            # (by model layer: a state layer, in no group, has no tensor)
            tensor_of_layer = [None] * num_layers
            for g, group in enumerate(allocation.groups):
                for j, layer in enumerate(group.layers):
                    tensor_of_layer[layer], self.layer_group[layer] = j, g
            first = min(shapes)
            tensor_shapes = [shapes[first]] * allocation.group_size
            tensor_latent = [latent_values.get(first)] * allocation.group_size
            self.num_table_groups = len(allocation.groups)
        ks = [torch.zeros(shape, dtype=dtype, device=device) for shape in tensor_shapes]
        vs = [torch.zeros_like(k) if latent is None else k[..., :latent]
              for k, latent in zip(ks, tensor_latent, strict=True)]
        self.k = [None if t is None else ks[t] for t in tensor_of_layer]
        self.v = [None if t is None else vs[t] for t in tensor_of_layer]
        # The tensors the arena allocated, `[num_slots, ...]` each (a latent layer's V, a view
        # of its K, is not one): what a copy of whole slots must move.
        self.pool_tensors = tuple(ks + [v for v, latent in zip(vs, tensor_latent, strict=True)
                                        if latent is None])
        self.latent_layers = frozenset(latent_values)
        # Per-layer fp8 scales (None: unquantized cache, or not yet written).
        self.k_scales: list[torch.Tensor | None] = [None] * num_layers
        self.v_scales: list[torch.Tensor | None] = [None] * num_layers
        if self.is_fp8 and kv_scale is not None:
            given = torch.tensor(float(kv_scale), dtype=torch.float32, device=device)
            self.k_scales = [given.clone() for _ in range(num_layers)]
            self.v_scales = [given.clone() for _ in range(num_layers)]

    @property
    def is_fp8(self) -> bool:
        return self.dtype == torch.float8_e4m3fn

    def init_scales(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Set the layer's fp8 scales from its first write's K/V (no-op once set)."""
        if not self.is_fp8 or self.k_scales[layer] is not None:
            return
        self.k_scales[layer] = _scale_from(k)
        # one tensor, one scale: the latent's value view is read with the row's scale
        self.v_scales[layer] = (self.k_scales[layer] if layer in self.latent_layers
                                else _scale_from(v))

    def scales(self) -> dict[str, list[float | None]]:
        """The fp8 scales as numbers (for reports); empty for an unquantized arena."""
        if not self.is_fp8:
            return {}
        return {
            "k": [None if s is None else float(s) for s in self.k_scales],
            "v": [None if s is None else float(s) for s in self.v_scales],
        }

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.pool_tensors)

    def copy_slots(self, src: int, dst: int, n: int) -> None:
        for cache in self.pool_tensors:
            cache[dst : dst + n] = cache[src : src + n]


def _scale_from(x: torch.Tensor) -> torch.Tensor:
    amax = x.detach().abs().amax().float()
    return torch.clamp(amax / FP8_SCALE_TARGET, min=FP8_SCALE_FLOOR)


def graphs_supported(device: torch.device, backend_name: str) -> bool:
    """CUDA graphs need CUDA and the Triton backend (the torch ops read lengths on the host)."""
    return device.type == "cuda" and backend_name == "triton"


class ModelExecutor(TensorExecutor):
    """Runs steps on the model. Decode-only steps replay CUDA graphs (`decode_graphs.py`) on
    CUDA with the Triton backend unless `enforce_eager`; `max_num_seqs` bounds the captured
    batch sizes."""

    def __init__(
        self,
        model: LlamaDecoder,
        arena: KVArena,
        ops: AttentionOps,
        device: torch.device,
        backend_name: str = "torch",
        *,
        enforce_eager: bool = True,
        max_num_seqs: int = 256,
    ) -> None:
        self.model = model
        self.config = model.config
        self.arena = arena
        self.ops = ops
        self.device = device
        self.backend_name = backend_name
        self.softmax_scale = model.softmax_scale
        # Each layer's score variant (`kvbench.kernels.reference`): its sliding window, if
        # any, its learned sinks (gpt-oss's `self_attn.sinks`) and the scores' soft-cap
        # (Gemma 2), if it has them.
        self.layer_variants: list[dict] = [
            {} if (w := self.config.layer_window(i)) is None else {"sliding_window": w}
            for i in range(self.config.num_layers)
        ]
        for variant, layer in zip(self.layer_variants, model.model.layers, strict=True):
            if (sinks := getattr(getattr(layer, "self_attn", None), "sinks", None)) is not None:
                variant["sinks"] = sinks
        if (cap := self.config.attn_logit_softcapping) is not None:
            for variant in self.layer_variants:
                variant["softcap"] = cap
        self.inputs = StepInputs(device)
        self._layout_kind, self._block_size = "paged", 1  # of the step being run
        self.graphs: DecodeGraphs | None = None
        self.host_tier: HostKVTier | None = None
        self._host_jobs_done: list[int] = []  # copied, not yet reported (`finished_host_jobs`)
        self.last_host_copies: HostCopyStats | None = None  # the last step's, with a tier
        # A state-space hybrid's states, in the arena's blocks the strategy gives them
        # (`pooled_states`), made at the first step (its block size is the layout's).
        self.state_pool: StatePool | None = None
        if not enforce_eager:
            self.enable_cuda_graphs(max_num_seqs)

    def enable_cuda_graphs(self, max_num_seqs: int) -> bool:
        """Replay decode steps of up to `max_num_seqs` sequences from CUDA graphs; False (and
        eager) off CUDA, without the Triton backend, or for a mixture of experts (its forward
        picks the experts a step runs on the host: shapes a captured graph cannot replay), nor for
        an arena with a table per layer group (the graphs capture one table)."""
        if (not graphs_supported(self.device, self.backend_name) or self.config.is_moe
                or self.arena.latent_layers or self.arena.num_table_groups > 1
                or self.config.hybrid is not None):
            return False
        arena = self.arena
        # The graphs call back into this executor: through a weak reference, since a cycle
        # would keep a finished engine's arena (most of a GPU) alive until the garbage
        # collector happens to run, after the next engine has asked for its own.
        forward = weakref.WeakMethod(self._forward)
        self.graphs = DecodeGraphs(
            lambda *args: forward()(*args), self.device, max_num_seqs, arena.num_slots, self.config.num_kv_heads,
            fp8_ready=lambda: not arena.is_fp8 or None not in arena.k_scales,
        )
        return True

    def attach_host_tier(self, tier: HostKVTier) -> None:
        """Copy each step's `KVLayout.host_copies` between the arena and `tier`."""
        self.host_tier = tier

    def _host_copies(self, layout: KVLayout) -> None:
        """The layout's stores and loads, in order; the forward waits for them (`wait`)."""
        tier = self.host_tier
        if tier is None:
            raise RuntimeError("the layout moves blocks to or from a host tier, but the "
                               "executor has none (attach_host_tier)")
        for copy in layout.host_copies:
            if copy.direction == "store":
                tier.store(copy.gpu_blocks, copy.host_blocks)
            else:
                tier.load(copy.host_blocks, copy.gpu_blocks)
        tier.wait()
        if layout.host_transfers is not None:  # done before the forward: report them after
            self._host_jobs_done.extend(layout.host_transfers.jobs)

    def keep_host_tier(self, num_blocks: int, block_size: int, block_bytes: int) -> None:
        """`--kv-offload` in host memory (checked against what the host has when the run
        was planned: `ModelExecutors.check_host_tier_bytes`)."""
        self.attach_host_tier(HostKVTier(self.arena.pool_tensors, num_blocks, block_size))

    def transfer_host(self, transfers: HostTransfers) -> None:
        """A step that computes nothing still moves the copies decided (`Engine`)."""
        self._host_copies(KVLayout("paged", host_transfers=transfers))

    def finished_host_jobs(self) -> list[int]:
        done, self._host_jobs_done = self._host_jobs_done, []
        return done

    def capture_decode_graphs(self, layout_kind: str, block_size: int, max_model_len: int) -> int:
        """Capture every decode graph a run of this layout can replay, before it is measured;
        how many (0 without graphs)."""
        if self.graphs is None:
            return 0
        self._layout_kind, self._block_size = layout_kind, block_size
        with torch.inference_mode():
            return self.graphs.capture_all(layout_kind, block_size, max_model_len)

    def _forward(self, input_ids, positions, idx: DeviceIndices, decode_extra: dict):
        """A decode-only forward over `idx` (what `DecodeGraphs` captures)."""
        attend = self._attention(self._layout_kind, self._block_size, idx, {}, decode_extra)
        return self.model(input_ids, positions, attend)

    def _attention(self, kind: str, block_size: int, idx: DeviceIndices, prefill_extra: dict,
                   decode_extra: dict):
        ops, arena, scale = self.ops, self.arena, self.softmax_scale
        p, pt = idx.num_prefill_seqs, idx.num_prefill_tokens
        variants = self.layer_variants
        latent_layers = arena.latent_layers
        layer_group = arena.layer_group
        group_slots, group_tables = idx.group_slot_mappings, idx.group_tables
        # the decodes' rows, sliced once a step rather than once a layer
        decode_lens = idx.seq_lens[p:] if p else idx.seq_lens
        decode_starts = idx.start_slots[p:] if kind != "paged" else None

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = arena.k[layer], arena.v[layer]
            variant = variants[layer]
            slot_mapping, block_tables = idx.slot_mapping, idx.tables
            start_slots = ring_lens = None  # None: `idx.start_slots`; no ring
            if group_slots is not None:  # a table per allocation group: this layer's group's
                g = layer_group[layer]
                slot_mapping, block_tables = group_slots[g], group_tables[g]
                if kind != "paged":  # (start slot, ring length) per sequence
                    start_slots = block_tables[:, 0]
                    if "sliding_window" in variant:  # a window group's ring
                        ring_lens = block_tables[:, 1]
            if arena.is_fp8 and arena.k_scales[layer] is None:
                arena.init_scales(layer, k, v)
            ks, vs = arena.k_scales[layer], arena.v_scales[layer]
            with trace_range("write_kv", layer=layer, tokens=k.shape[0]):
                if layer in latent_layers:  # V is a view of K: one write
                    write_latent(k, kc, slot_mapping, ks)
                else:
                    ops.write_kv(k, v, kc, vc, slot_mapping, ks, vs)

            def decode(q_dec: torch.Tensor) -> torch.Tensor:
                """The decodes' attention: the batch's rows from `p` on."""
                with trace_range("decode_attention", layer=layer, seqs=q_dec.shape[0],
                                 tokens=q_dec.shape[0]):
                    if kind == "paged":
                        return ops.paged_decode_attention(
                            q_dec, kc, vc, block_tables[p:] if p else block_tables, decode_lens,
                            block_size, scale, ks, vs, **variant, **decode_extra)
                    starts = decode_starts if start_slots is None else start_slots[p:]
                    ring = {} if ring_lens is None else {"ring_lens": ring_lens[p:]}
                    return ops.contiguous_decode_attention(
                        q_dec, kc, vc, starts, decode_lens, scale, ks, vs,
                        **variant, **ring, **decode_extra)

            if not p:  # decode only: the kernel's output is the layer's, no copy into a buffer
                return decode(q)
            with trace_range("prefill_attention", layer=layer, seqs=p, tokens=pt):
                if kind == "paged":
                    prefilled = ops.paged_attention(
                        q[:pt], kc, vc, block_tables[:p], idx.query_start_loc,
                        idx.seq_lens[:p], block_size, scale, ks, vs, **variant,
                        **prefill_extra,
                    )
                else:
                    starts = idx.start_slots if start_slots is None else start_slots
                    ring = {} if ring_lens is None else {"ring_lens": ring_lens[:p]}
                    prefilled = ops.contiguous_attention(
                        q[:pt], kc, vc, starts[:p], idx.query_start_loc,
                        idx.seq_lens[:p], scale, ks, vs, **variant, **ring, **prefill_extra,
                    )
            if q.shape[0] == pt:  # prefill only: its output is the layer's, as a decode's
                return prefilled
            out = q.new_empty((*q.shape[:-1], vc.shape[-1]))
            out[:pt] = prefilled
            out[pt:] = decode(q[pt:])
            return out

        return attend

    def _eager_attention(self, layout: KVLayout, idx: DeviceIndices):
        p = idx.num_prefill_seqs
        # Host-side maxima spare the Triton wrappers a device sync per layer.
        prefill_extra: dict = {}
        decode_extra: dict = {}
        if self.backend_name == "triton":
            prefill_extra = {"max_query_len": max(layout.query_lens[:p], default=1)}
            decode_extra = {"max_seq_len": max(layout.seq_lens[p:], default=1)}
        return self._attention(layout.kind, layout.block_size, idx, prefill_extra, decode_extra)

    def _state_pool(self, layout: KVLayout) -> StatePool:
        """Where the states sit in blocks of the layout's size (made at the first step)."""
        pool = self.state_pool
        if pool is None or pool.block_size != layout.block_size:
            hybrid = self.config.hybrid
            held = [len(b) for b in layout.state_blocks or ()]
            pool = self.state_pool = StatePool(
                self.arena.pool_tensors, layout.block_size, hybrid.recurrent,
                hybrid.recurrent_layers, next(self.model.parameters()).dtype,
                min(held) if held else None)
        return pool

    def _states(self, layout: KVLayout) -> PooledStates:
        """The step's recurrent states, in the blocks the strategy holds them in."""
        if layout.state_blocks is None:
            raise RuntimeError(f"model {self.config.name} keeps a recurrent state, but the "
                               "layout names no state blocks (a strategy that holds them: paged)")
        return self._state_pool(layout).step(layout.query_lens, layout.seq_lens, layout.state_blocks)

    @torch.inference_mode()
    def execute(self, batch: StepBatch) -> torch.Tensor:
        layout = batch.layout
        with trace_range("prepare", tokens=batch.num_tokens):
            if layout.host_transfers is not None:  # first: a store reads a block freed this
                self._host_copies(layout)  # step, which a copy-on-write below may be given
            for copy in layout.slot_copies:
                self.arena.copy_slots(copy.src_slot, copy.dst_slot, copy.num_slots)
            if layout.state_copies:  # before the states are gathered: checkpoints, hits, forks
                pool = self._state_pool(layout)
                for src, dst in layout.state_copies:
                    pool.copy(src, dst)
            idx = self.inputs.build(batch)
            input_ids, positions, rows = idx.input_ids, idx.positions, idx.sample_rows
        phase = "prefill" if batch.num_prefill_seqs else "decode"
        with trace_range(
            phase,
            prefill_seqs=batch.num_prefill_seqs,
            decode_seqs=batch.num_decode_seqs,
            tokens=batch.num_tokens,
        ):
            self._layout_kind, self._block_size = layout.kind, layout.block_size
            if self.graphs is not None and self.graphs.can_run(batch, idx):
                hidden = self.graphs.run(batch, idx)
            elif self.config.hybrid is not None:
                states = self._states(layout)
                hidden = self.model(input_ids, positions, self._eager_attention(layout, idx),
                                    states)
                states.store()
            else:
                hidden = self.model(input_ids, positions, self._eager_attention(layout, idx))
            # a decode-only step samples every row in order: no gather of the hidden states
            every_row = batch.sample_rows == list(range(batch.num_tokens))
            logits = self.model.logits(hidden if every_row else hidden[rows])
            self.synchronize()
        if self.host_tier is not None:
            self.last_host_copies = self.host_tier.take_step_stats()
        return logits
