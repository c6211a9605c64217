"""Qwen3-Next (kvbench.models.qwen3_next): Gated DeltaNet and gated full attention layers,
partial rope, (1 + w) norms, experts with a gated shared expert, loaded from a tiny random
transformers checkpoint and run on the flat batch with its recurrent states carried through a
`RecurrentStates`: logits and greedy tokens against transformers' Qwen3NextForCausalLM, whole
prompts, prompts in chunks, and sequences of different lengths batched together."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvbench.models.gated_deltanet import (
    chunked_gated_delta_rule,
    l2norm,
    recurrent_gated_delta_rule,
)
from kvbench.models.loader import init_dummy_weights, load_model
from kvbench.models.qwen3_next import Qwen3NextDecoder
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.test_parity_hf import hf_greedy

transformers = pytest.importorskip("transformers")

# Five layers, full attention at 1 and 4; two key heads of 16 serve four value heads of 8
# (grouped, Dk != Dv); an 0.25 partial rope (4 of 16 dims); 8 experts, 2 a token, beside a
# gated shared expert; layer 2 a dense MLP. A chunk of the delta rule is 64 tokens, so the
# prompts below cross chunks.
TINY_QWEN3_NEXT = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    shared_expert_intermediate_size=48, num_hidden_layers=5, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
    num_experts=8, num_experts_per_tok=2, mlp_only_layers=[2],
    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                 "full_attention"],
    max_position_embeddings=1024, initializer_range=0.15, bos_token_id=None,
    eos_token_id=None, pad_token_id=None,
)


def make_qwen3_next(folder, seed: int = 0, **fields):
    """A random Qwen3NextForCausalLM saved to `folder`; every norm weight drawn away from its
    identity so a norm read as the wrong kind ((1 + w) or plain) changes tokens, and slow
    decays (A = exp(A_log) in [0.005, 0.1], where transformers draws up to 16 and the state
    forgets within a token or two) so a state not carried across steps changes tokens."""
    torch.manual_seed(seed)
    config = transformers.Qwen3NextConfig(**{**TINY_QWEN3_NEXT, **fields})
    model = transformers.Qwen3NextForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                identity = 1.0 if "linear_attn" in name else 0.0
                param.copy_(identity + 0.5 * torch.randn_like(param))
            elif name.endswith("A_log"):
                param.copy_(torch.empty_like(param).uniform_(0.005, 0.1).log())
            elif name.endswith("dt_bias"):
                param.copy_(torch.randn_like(param))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3_next")
    hf_model = make_qwen3_next(folder)
    model, config = load_model(str(folder))
    return folder, hf_model, model, config


class DictStates:
    """`RecurrentStates` over a dict: (sequence id, layer) -> its states, zeros when new."""

    def __init__(self, config) -> None:
        self.shapes = config.hybrid.recurrent.state_shapes()
        self.store: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}
        self.seq_ids: list[int] = []
        self.query_lens: list[int] = []

    def read(self, layer: int) -> tuple[torch.Tensor, ...]:
        per_seq = [self.store.get((s, layer)) or tuple(torch.zeros(shape) for shape in self.shapes)
                   for s in self.seq_ids]
        return tuple(torch.stack(parts) for parts in zip(*per_seq, strict=True))

    def write(self, layer: int, states: tuple[torch.Tensor, ...]) -> None:
        for tensor, shape in zip(states, self.shapes, strict=True):
            assert tuple(tensor.shape) == (len(self.seq_ids), *shape)
        for i, seq in enumerate(self.seq_ids):
            self.store[(seq, layer)] = tuple(t[i].clone() for t in states)


class DictAttention:
    """Causal attention over each sequence's keys and values so far, kept per layer."""

    def __init__(self, config) -> None:
        self.scale = config.softmax_scale
        self.kv: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.seq_ids: list[int] = []
        self.query_lens: list[int] = []

    def __call__(self, layer, q, k, v):
        out, start = [], 0
        for seq, length in zip(self.seq_ids, self.query_lens, strict=True):
            end = start + length
            old_k, old_v = self.kv.get((seq, layer), (k[:0], v[:0]))
            keys, values = torch.cat((old_k, k[start:end])), torch.cat((old_v, v[start:end]))
            self.kv[(seq, layer)] = (keys, values)
            groups = q.shape[1] // keys.shape[1]
            keys = keys.repeat_interleave(groups, dim=1)
            values = values.repeat_interleave(groups, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[start:end], keys) * self.scale
            past = keys.shape[0] - length
            allowed = (torch.arange(keys.shape[0])[None, :]
                       <= past + torch.arange(length)[:, None])
            weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
            out.append(torch.einsum("hqk,khd->qhd", weights, values))
            start = end
        return torch.cat(out)


class Runner:
    """Steps of a flat batch through the model: each step a list of (sequence, tokens)."""

    def __init__(self, model, config) -> None:
        self.model, self.states, self.attention = model, DictStates(config), DictAttention(config)
        self.positions: dict[int, int] = {}

    def step(self, parts: list[tuple[int, list[int]]]) -> torch.Tensor:
        """Logits `[T, vocab]` of the step's tokens."""
        ids, positions = [], []
        for seq, tokens in parts:
            start = self.positions.get(seq, 0)
            ids += tokens
            positions += range(start, start + len(tokens))
            self.positions[seq] = start + len(tokens)
        for holder in (self.states, self.attention):
            holder.seq_ids = [seq for seq, _ in parts]
            holder.query_lens = [len(tokens) for _, tokens in parts]
        with torch.no_grad():
            hidden = self.model(torch.tensor(ids), torch.tensor(positions), self.attention,
                                self.states)
            return self.model.logits(hidden)


def last_logits(logits: torch.Tensor, parts) -> list[torch.Tensor]:
    ends = torch.tensor([len(tokens) for _, tokens in parts]).cumsum(0) - 1
    return [logits[i] for i in ends.tolist()]


def test_config_reads_the_hybrid_and_partial_rope(checkpoint):
    _, _, _, config = checkpoint
    assert config.hybrid.mixers == ("recurrent", "attention", "recurrent", "recurrent",
                                    "attention")
    assert config.partial_rotary_factor == 0.25
    assert config.dense_layers == (2,)
    assert config.hybrid.recurrent.state_shapes() == ((3, 2 * 2 * 16 + 4 * 8), (4, 8, 16))


def test_whole_prompt_logits_match_transformers(checkpoint):
    _, hf_model, model, config = checkpoint
    prompt = random_prompts(1, 512, seed=3, min_len=150, max_len=150)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    ours = Runner(model, config).step([(0, prompt)])
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_prompt_in_chunks_then_decode_gives_transformers_greedy_tokens(checkpoint):
    """Chunks of 37, 64, 1 and 48 tokens (the last crossing the delta rule's 64-token chunk)
    carry the conv and recurrent states through `RecurrentStates`, then one-token steps."""
    _, hf_model, model, config = checkpoint
    prompt = random_prompts(1, 512, seed=4, min_len=150, max_len=150)[0]
    new_tokens = 12
    expected = hf_greedy(hf_model, [prompt], new_tokens)[0]
    runner, start = Runner(model, config), 0
    for size in (37, 64, 1, 48):
        logits = runner.step([(0, prompt[start:start + size])])
        start += size
    assert start == len(prompt)
    got = [int(logits[-1].argmax())]
    while len(got) < new_tokens:
        got.append(int(runner.step([(0, [got[-1]])])[-1].argmax()))
    assert got == expected


def test_sequences_of_different_lengths_in_one_batch(checkpoint):
    """Two prompts (130 and 23 tokens) prefilled in one flat batch, then decoded together;
    a third (100 tokens) prefills in chunks of 40 beside their decodes: each sequence's
    tokens are transformers' for it alone."""
    _, hf_model, model, config = checkpoint
    prompts = [random_prompts(1, 512, seed=6 + i, min_len=n, max_len=n)[0]
               for i, n in enumerate((130, 23, 100))]
    new_tokens = 10
    expected = hf_greedy(hf_model, prompts, new_tokens)
    runner = Runner(model, config)
    parts = [(0, prompts[0]), (1, prompts[1])]
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for seq, logits in zip((0, 1), last_logits(runner.step(parts), parts), strict=True):
        got[seq].append(int(logits.argmax()))
    third, start = prompts[2], 0
    while any(len(tokens) < new_tokens for tokens in got.values()):
        parts = [(seq, [tokens[-1]]) for seq, tokens in got.items()
                 if tokens and len(tokens) < new_tokens]
        prefilling = start < len(third)
        if prefilling:  # the third prompt in chunks of 40 beside the decodes
            parts.append((2, third[start:start + 40]))
            start += 40
        for (seq, _), logits in zip(parts, last_logits(runner.step(parts), parts), strict=True):
            if seq != 2 or start >= len(third):
                got[seq].append(int(logits.argmax()))
    assert [got[0], got[1], got[2]] == expected


def test_chunked_delta_rule_is_the_recurrence(checkpoint):
    """The chunked form against the token-by-token recurrence and transformers' reference
    (its state `[key dim, value dim]`, the transpose of vLLM's and kvbench's), from a
    non-zero state, over a length that is not a multiple of the chunk."""
    from transformers.models.qwen3_next import modeling_qwen3_next as hf

    gen = torch.Generator().manual_seed(0)
    n, t, heads, dk, dv = 2, 70, 4, 16, 8
    q, k = (torch.randn(n, t, heads, dk, generator=gen) for _ in range(2))
    v = torch.randn(n, t, heads, dv, generator=gen)
    g = -torch.rand(n, t, heads, generator=gen)
    beta = torch.rand(n, t, heads, generator=gen)
    state = 0.1 * torch.randn(n, heads, dv, dk, generator=gen)
    qn, kn = l2norm(q) * dk**-0.5, l2norm(k)
    step_out, step_state = recurrent_gated_delta_rule(qn, kn, v, g, beta, state)
    chunk_out, chunk_state = chunked_gated_delta_rule(qn, kn, v, g, beta, state, 16)
    hf_out, hf_state = hf.torch_chunk_gated_delta_rule(
        q, k, v, g, beta, chunk_size=64, initial_state=state.transpose(-1, -2),
        output_final_state=True, use_qk_l2norm_in_kernel=True)
    for out, final in ((chunk_out, chunk_state), (hf_out, hf_state.transpose(-1, -2))):
        torch.testing.assert_close(out, step_out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(final, step_state, atol=1e-5, rtol=1e-5)


def test_mtp_weights_are_skipped(checkpoint, tmp_path):
    """A published checkpoint's multi-token-prediction tensors (`mtp.*`) are not the model's."""
    folder, _, model, _ = checkpoint
    for file in folder.iterdir():
        if file.name != "model.safetensors":
            (tmp_path / file.name).write_bytes(file.read_bytes())
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "mtp.fc.weight": torch.ones(4, 4)}, tmp_path / "model.safetensors",
              metadata={"format": "pt"})
    loaded, _ = load_model(str(tmp_path))
    for name, param in loaded.state_dict().items():
        torch.testing.assert_close(param, model.state_dict()[name])


def test_dummy_weights_keep_every_norm_at_its_identity(checkpoint):
    folder, _, _, _ = checkpoint
    decoder = Qwen3NextDecoder(resolve_model_config(str(folder)))
    init_dummy_weights(decoder, seed=0)
    norms = {name: param for name, param in decoder.named_parameters()
             if name.endswith("norm.weight")}
    assert all(bool((p == (1.0 if "linear_attn" in n else 0.0)).all()) for n, p in norms.items())
    assert any("linear_attn.norm" in n for n in norms) and any("q_norm" in n for n in norms)
