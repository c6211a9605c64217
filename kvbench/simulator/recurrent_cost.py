"""The step-time terms of a state-space hybrid's layers (`ModelConfig.hybrid`), per GPU.

A hybrid's layers differ: A attend, R run a recurrent mixer (Gated DeltaNet, Mamba-2), some
have a feed-forward block (a mixture of experts or a dense MLP), out of L; the step model's
mean layer takes each kind's matmuls by its share (`mean`). A recurrent layer's projections
are matmuls split over the GPUs by heads; its state update and chunked scan are charged
beside attention (docs/simulator.md, State-space hybrids, gives the formulas and the scan's
FLOPs' sources).
"""

from __future__ import annotations

from kvbench.models.config import ModelConfig


class RecurrentCost:
    """One GPU's share of a hybrid's layers: counts, matmul shapes and the state's bytes."""

    def __init__(self, model: ModelConfig, tensor_parallel_size: int,
                 state_element_bytes: int) -> None:
        hybrid = model.hybrid
        assert hybrid is not None
        tp = tensor_parallel_size
        self.num_layers = model.num_layers
        self.attention_layers = len(hybrid.attention_layers)
        self.recurrent_layers = len(hybrid.recurrent_layers)
        self.moe_layers = sum(1 for i in hybrid.ffn_layers if model.is_moe_layer(i))
        self.dense_layers = len(hybrid.ffn_layers) - self.moe_layers
        mixer = hybrid.recurrent
        (k_in, n_in), (k_out, n_out) = mixer.projections(model.hidden_size)
        self.gemms = ((k_in, -(-n_in // tp)), (-(-k_out // tp), n_out))
        self.weights = sum(k * n for k, n in self.gemms)
        self.state_bytes = mixer.state_bytes(state_element_bytes, tp)
        self.scan_flops_per_token = mixer.scan_flops_per_token(tp)
        self.step_flops_per_token = mixer.step_flops_per_token(tp)
        self.shared_expert = -(-hybrid.shared_expert_intermediate_size // tp)
        self.mlp_matrices = 2 if hybrid.mlp_ungated else 3

    def mean(self, attention: float, recurrent: float, moe: float, dense: float) -> float:
        """A per-layer figure of each kind, averaged over the model's layers."""
        return (self.attention_layers * attention + self.recurrent_layers * recurrent
                + self.moe_layers * moe + self.dense_layers * dense) / self.num_layers
