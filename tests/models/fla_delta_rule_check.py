"""flash-linear-attention's Gated DeltaNet kernels, as kvbench calls them (`fla_delta_rule`),
against kvbench's PyTorch reference: the kernels alone over sequences of different lengths
(FLA's varlen `cu_seqlens`) from non-zero states, and a whole Gated DeltaNet layer (prefill
of two lengths, then decodes) through FLA against the same layer through the reference.

test_fla_gated_delta_rule.py runs these checks on CUDA in its own process, and on the CPU as
`python -m tests.models.fla_delta_rule_check` under TRITON_INTERPRET=1, where `__main__`
first adapts Triton's interpreter to FLA's kernels (`adapt_interpreter`)."""

from __future__ import annotations

import ast
import contextlib
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from kvbench.models import gated_deltanet
from kvbench.models.config import ModelConfig
from kvbench.models.gated_deltanet import (
    GatedDeltaNet,
    fla_delta_rule,
    fla_kernels,
    l2norm,
    recurrent_gated_delta_rule,
)


def random_inputs(lengths: list[int], key_heads: int, value_heads: int, dk: int, dv: int,
                  dtype: torch.dtype, device: str, seed: int) -> dict[str, torch.Tensor]:
    """The sequences end to end (`[1, T, ...]`), q and k not normalised, decays in
    Qwen3-Next's range (log decay -A softplus(a + dt_bias) <= 0), states not zero."""
    gen = torch.Generator().manual_seed(seed)
    tokens = sum(lengths)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    inputs = dict(
        q=draw(1, tokens, key_heads, dk), k=draw(1, tokens, key_heads, dk),
        v=draw(1, tokens, value_heads, dv),
        g=-0.1 * F.softplus(draw(1, tokens, value_heads)),
        beta=torch.rand(1, tokens, value_heads, generator=gen),
        state=0.1 * draw(len(lengths), value_heads, dv, dk),
        cu_seqlens=torch.tensor([0, *lengths]).cumsum(0),
    )
    return {name: t.to(device, torch.float32 if name in ("g", "state") else
                       torch.int64 if name == "cu_seqlens" else dtype)
            for name, t in inputs.items()}


def reference(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """kvbench's recurrence, one sequence at a time, in float32 on the CPU."""
    x = {name: t.cpu().float() for name, t in inputs.items() if name != "cu_seqlens"}
    bounds = inputs["cu_seqlens"].tolist()
    ratio = x["v"].shape[2] // x["q"].shape[2]
    outs, states = [], []
    for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        q, k = (l2norm(x[name][:, start:end].repeat_interleave(ratio, dim=2))
                for name in ("q", "k"))
        out, state = recurrent_gated_delta_rule(
            q * q.shape[-1] ** -0.5, k, x["v"][:, start:end], x["g"][:, start:end],
            x["beta"][:, start:end], x["state"][i:i + 1])
        outs.append(out)
        states.append(state)
    return torch.cat(outs, dim=1), torch.cat(states)


def check_kernels(device: str, dtype: torch.dtype, lengths: list[int], dk: int, dv: int,
                  tol: float, seed: int = 0) -> None:
    """Each FLA kernel over `lengths` (2 key heads serving 4 value heads) against the
    reference: outputs and final states. The chunked kernel is what kvbench dispatches for
    these lengths unless every one is 1; the fused recurrence runs them too, token by token."""
    chunk, recurrent = fla_kernels()
    inputs = random_inputs(lengths, 2, 4, dk, dv, dtype, device, seed)
    want_out, want_state = reference(inputs)
    args = [inputs[name] for name in ("q", "k", "v", "g", "beta", "state", "cu_seqlens")]
    one_token = all(n == 1 for n in lengths)
    for kernels in ((chunk, recurrent), (recurrent, recurrent)):
        if one_token and kernels[0] is recurrent:
            continue  # the dispatch already chose the recurrence
        out, state = fla_delta_rule(*args, kernels)
        assert out.shape == inputs["v"].shape and state.shape == inputs["state"].shape
        torch.testing.assert_close(out.cpu().float(), want_out, atol=tol, rtol=tol)
        torch.testing.assert_close(state.cpu(), want_state, atol=tol, rtol=tol)


def tiny_layer(seed: int) -> GatedDeltaNet:
    """Layer 0 of a Qwen3-Next config (2 key heads of 16, 4 value heads of 8, conv kernel
    4) with seeded random weights."""
    config = ModelConfig.from_hf_config(dict(
        model_type="qwen3_next", vocab_size=64, hidden_size=32, intermediate_size=64,
        moe_intermediate_size=16, shared_expert_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        layer_types=["linear_attention", "full_attention"], max_position_embeddings=128,
        rms_norm_eps=1e-6, torch_dtype="float32"), "tiny-qwen3-next")
    torch.manual_seed(seed)
    layer = GatedDeltaNet(config, 0)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name == "A_log":
                param.copy_(torch.empty_like(param).uniform_(0.005, 0.1).log())
            elif name.endswith("norm.weight"):
                param.copy_(1 + 0.5 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    return layer


class ListStates:
    """`RecurrentStates` over this layer's (conv, recurrent) states of the step's sequences."""

    def __init__(self, states: tuple[torch.Tensor, torch.Tensor], query_lens: list[int]):
        self.states, self.query_lens = states, query_lens

    def read(self, layer: int) -> tuple[torch.Tensor, ...]:
        return self.states

    def write(self, layer: int, states: tuple[torch.Tensor, ...]) -> None:
        self.states = states


@contextlib.contextmanager
def fla_on_every_device() -> Iterator[None]:
    """FLA's kernels for CPU tensors too (for the interpreter; on CUDA they are the default)."""
    original = gated_deltanet.fla_kernels_for
    gated_deltanet.fla_kernels_for = lambda x: fla_kernels()
    try:
        yield
    finally:
        gated_deltanet.fla_kernels_for = original


def check_layer(device: str, tol: float, seed: int = 0) -> None:
    """Two sequences (7 and 3 tokens, one FLA call per length) from non-zero states, then two
    one-token steps of both: the layer's outputs and states by FLA (on `device`) against the
    same layer by the reference (on the CPU)."""
    layer = tiny_layer(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    conv_shape, state_shape = layer.conv1d.weight.shape[0], (4, 8, 16)
    states = (0.3 * torch.randn(2, 3, conv_shape, generator=gen),
              0.1 * torch.randn(2, *state_shape, generator=gen))
    ours = ListStates(tuple(t.to(device) for t in states), [])
    theirs = ListStates(states, [])
    fla_layer = tiny_layer(seed).to(device)
    for query_lens in ([7, 3], [1, 1], [1, 1]):
        x = torch.randn(sum(query_lens), 32, generator=gen)
        ours.query_lens = theirs.query_lens = query_lens
        with torch.no_grad(), fla_on_every_device():
            got = fla_layer(x.to(device), ours)
        with torch.no_grad():
            want = layer(x, theirs)
        torch.testing.assert_close(got.cpu(), want, atol=tol, rtol=tol)
        for mine, ref in zip(ours.states, theirs.states, strict=True):
            torch.testing.assert_close(mine.cpu(), ref, atol=tol, rtol=tol)


def adapt_interpreter() -> None:
    """Two things Triton's CPU interpreter does not do as a GPU build does, which FLA's chunked
    kernels rely on: an autotuner with several configs benchmarks them (the interpreter has no
    benchmarker; every config computes the same, so the first is taken), and a `for` loop's
    index is a Triton tensor (FLA calls `.to` on it; the interpreter leaves a Python int, so
    each loop here rebinds it through the interpreter's own tensor conversion)."""
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs
    Autotuner.prune_configs = lambda self, kwargs: prune(self, kwargs)[:1]

    def visit_for(self: ast.NodeTransformer, node: ast.For) -> ast.For:
        node = self.generic_visit(node)
        if isinstance(node.target, ast.Name):
            name = node.target.id
            rebind = self.visit_Assign(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                                  value=ast.Name(id=name, ctx=ast.Load())))
            node.body.insert(0, ast.fix_missing_locations(ast.copy_location(rebind, node)))
        return node

    interpreter.ASTTransformer.visit_For = visit_for


if __name__ == "__main__":
    adapt_interpreter()
    for lengths in ([5, 3], [1, 1, 1]):
        check_kernels("cpu", torch.float32, lengths, dk=16, dv=16, tol=1e-5)
        print(f"kernels {lengths}: ok")
    check_layer("cpu", tol=1e-5)
    print("layer: ok")
    sys.exit(0)
