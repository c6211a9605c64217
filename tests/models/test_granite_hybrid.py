"""Granite-4.0-H (Mamba-2 and attention layers, experts beside a shared MLP, mu-P
multipliers) in kvbench's engine against transformers' GraniteMoeHybridForCausalLM: logits
of one prefill, the SSD chunked scan against the plain recurrence, and greedy tokens through
`paged` in prefill + decode, chunked prefill, preemption and parallel sampling, with the
recurrent states kept in the KV arena's state blocks."""

from __future__ import annotations

import json
import math

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.cli import main
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.kernels import reference as ops
from kvbench.models.loader import load_model
from kvbench.models.mamba2 import ssd_scan, ssm_step
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_prefill_and_decode,
    check_state_preemption,
    check_state_prefix_hits,
    check_strategy_holds_state,
    engine_tokens,
)
from tests.models.test_parity_hf import hf_greedy


def sequential_scan(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                    c: torch.Tensor, initial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`ssd_scan` token by token (`ssm_step`): the recurrence as written, what the chunked
    form must equal."""
    state, ys = initial[None], []
    for t in range(x.shape[0]):
        y, state = ssm_step(state, x[t : t + 1], dt[t : t + 1], a, b[t : t + 1], c[t : t + 1])
        ys.append(y)
    return torch.cat(ys), state[0]


transformers = pytest.importorskip("transformers")

# Four layers, the second attention; 8 Mamba heads of 16 in 2 groups, d_state 16, a 32-token
# scan chunk (every scenario's prompts span several); 4 experts, 2 a token; multipliers far
# from 1 so that one left out changes the tokens.
TINY_GRANITE = dict(
    vocab_size=512, hidden_size=64, intermediate_size=32, shared_intermediate_size=96,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=512, layer_types=["mamba", "attention", "mamba", "mamba"],
    mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=16, mamba_d_head=16, mamba_d_conv=4,
    mamba_expand=2, mamba_chunk_size=32, num_local_experts=4, num_experts_per_tok=2,
    embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
    logits_scaling=2.0, initializer_range=0.1, bos_token_id=None, eos_token_id=None,
    pad_token_id=None)


def make_granite(folder, seed: int = 0, **fields):
    """A random Granite-4.0-H saved to `folder`. transformers initialises A_log, D, dt_bias,
    the conv bias and the norms to constants; they are drawn here so that each one loaded
    wrong (or left out) changes tokens. Slow decays (A in [-0.5, -0.01], time steps near
    softplus(-2)) keep a state's effect alive across a whole prompt, so a state dropped or
    carried wrongly between chunks or steps changes the tokens."""
    torch.manual_seed(seed)
    config = transformers.GraniteMoeHybridConfig(**{**TINY_GRANITE, **fields})
    model = transformers.GraniteMoeHybridForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.uniform_(math.log(0.01), math.log(0.5))
            elif name.endswith("dt_bias"):
                param.normal_(-2.0, 0.5)
            elif name.endswith(("mamba.D", "conv1d.bias")):
                param.normal_(0.0, 0.5)
            elif name.endswith("norm.weight"):
                param.normal_(1.0, 0.3)
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def granite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("granite")
    return folder, make_granite(folder)


class DictStates:
    """`RecurrentStates` over one sequence, held in a dict (zeros before its first write)."""

    def __init__(self, length: int, shapes) -> None:
        self.query_lens = [length]
        self.shapes = shapes
        self.held: dict[int, tuple[torch.Tensor, ...]] = {}

    def read(self, layer):
        return self.held.get(layer) or tuple(torch.zeros(1, *s) for s in self.shapes)

    def write(self, layer, states):
        self.held[layer] = states


def reference_prefill_logits(folder, prompt: list[int]) -> torch.Tensor:
    model, config = load_model(str(folder))
    n = len(prompt)
    k_cache = torch.zeros(n, config.num_kv_heads, config.head_dim)
    v_cache = torch.zeros_like(k_cache)

    def attend(layer, q, k, v):
        ops.write_kv(k, v, k_cache, v_cache, torch.arange(n))
        return ops.contiguous_attention(q, k_cache, v_cache, torch.tensor([0]),
                                        torch.tensor([0, n]), torch.tensor([n]),
                                        config.softmax_scale)

    states = DictStates(n, config.hybrid.recurrent.state_shapes())
    with torch.no_grad():
        return model.logits(model(torch.tensor(prompt), torch.arange(n), attend, states))


def test_config_reads_granite_fields(granite):
    folder, hf_model = granite
    config = resolve_model_config(str(folder))
    hybrid = config.hybrid
    # transformers 5 writes the layer types as "linear_attention" / "full_attention"
    assert hf_model.config.layer_types[:2] == ["linear_attention", "full_attention"]
    assert hybrid.mixers == ("recurrent", "attention", "recurrent", "recurrent")
    assert (hybrid.embedding_multiplier, hybrid.residual_multiplier,
            hybrid.logits_scaling) == (3.0, 0.5, 2.0)
    assert config.softmax_scale == 0.2 and not hybrid.rope
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


@pytest.mark.parametrize("fields", [{}, dict(position_embedding_type="rope", rope_theta=500.0),
                                    dict(num_local_experts=0)],
                         ids=["nope", "rope", "dense"])
def test_prefill_logits_match_transformers(fields, tmp_path):
    """100 tokens (four scan chunks): logits within 1e-4 of transformers'; with rope, and
    with the shared MLP alone."""
    hf_model = make_granite(tmp_path, **fields)
    prompt = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(reference_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_chunked_scan_is_the_recurrence():
    """The SSD chunked scan (70 tokens in chunks of 16, from a nonzero state) equals the
    recurrence stepped token by token: outputs and final state."""
    g = torch.Generator().manual_seed(0)
    length, heads, head_dim, state_size = 70, 4, 8, 6
    x = torch.randn(length, heads, head_dim, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(length, heads, generator=g))
    a = -torch.rand(heads, generator=g) * 4
    b = torch.randn(length, heads, state_size, generator=g)
    c = torch.randn(length, heads, state_size, generator=g)
    initial = torch.randn(heads, head_dim, state_size, generator=g)
    y, state = ssd_scan(x, dt, a, b, c, initial, 16)
    y_ref, state_ref = sequential_scan(x, dt, a, b, c, initial)
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state, state_ref, atol=1e-4, rtol=1e-4)


def test_prefill_and_decode_match_transformers(granite):
    check_prefill_and_decode(*granite, 20, 100)


def test_chunked_prefill_matches_transformers(granite):
    """~190-token prompts under a 64-token step budget: each prompt's state carries over
    three or more chunks (and the scan's 32-token chunks inside them)."""
    check_chunked_prefill(*granite, 150, 200)


def test_preemption_matches_transformers(granite):
    check_state_preemption(*granite)


def test_state_blocks_are_the_strategys(granite):
    """The strategy pages in vLLM's raised block (a Mamba layer's state fits one attention
    page) and each sequence holds its state blocks; the executor's state fits in them."""
    folder, _ = granite
    built = build_engine(EngineConfig(model=str(folder), device="cpu", strategy="paged",
                                      kv_memory="4MiB"))
    engine = built.engine
    strategy = engine.strategy
    # conv (3 x 192) + SSM (8 x 16 x 16) float32 a layer: 10,496 B over 256 B a token of
    # attention -> 41 tokens, raised to 48; three state groups of one page each
    assert (strategy.block_size, strategy.state_blocks) == (48, 3)
    engine.add_request(Request(0, 0.0, tuple(range(1, 60)), 4))
    engine.run_to_completion()
    pool = engine.executor.state_pool
    assert pool.state_bytes == 3 * 10_496 <= 3 * pool.block_bytes


def test_parallel_samples_copy_the_state(granite):
    """n = 2 greedy samples: the child forks after the prompt, its state blocks copied from
    the parent's; both continue as transformers does."""
    folder, hf_model = granite
    prompt = random_prompts(1, 512, seed=7, min_len=70, max_len=70)[0]
    engine = build_engine(EngineConfig(model=str(folder), device="cpu", strategy="paged",
                                       kv_memory="4MiB", temperature=0.0)).engine
    engine.add_request(Request(0, 0.0, tuple(prompt), 12, n=2))
    engine.run_to_completion()
    want = hf_greedy(hf_model, [prompt], 12)[0]
    assert [s.token_ids[len(prompt):] for s in engine.sequences[0]] == [want, want]


def test_prefix_all_is_refused(granite):
    """`all`'s per-block state pages are not written by the executor: refused naming what
    runs, as the simulator still runs it."""
    folder, _ = granite
    with pytest.raises(KvbenchInputError, match="under --strategy prefix --mamba-cache-mode "
                       "all.*runs under --strategy paged, fp8, hybrid, hybrid-prefix, "
                       r"contiguous or prefix \(--mamba-cache-mode none or align"):
        build_engine(EngineConfig(model=str(folder), device="cpu", strategy="prefix",
                                  mamba_cache_mode="all"))
    simulated = build_engine(EngineConfig(model=str(folder), strategy="prefix",
                                          kv_memory="1MiB", mamba_cache_mode="all"),
                             executor=SimulatedExecutors("l4"))
    assert simulated.engine.strategy.capacity_slots > 0


def test_kvbench_run_refuses_prefix_all_in_one_line(granite, tmp_path, capsys):
    """`kvbench run` exits non-zero with one line, no traceback, no results folder."""
    folder, _ = granite
    assert main(["run", "--model", str(folder), "--strategy", "prefix",
                 "--mamba-cache-mode", "all", "--workload", "uniform", "--num-requests", "2",
                 "--kv-memory", "1MiB", "--quiet", "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mamba-cache-mode all" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_prefix_without_checkpoints_matches_transformers(granite):
    """`prefix --mamba-cache-mode none` keeps no state checkpoint, so serves no hit: its
    running state sits in state blocks as `paged`'s, tokens equal transformers'."""
    folder, hf_model = granite
    shared = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    prompts = [shared + tail for tail in random_prompts(2, 512, seed=4, min_len=5, max_len=9)]
    got, seqs = engine_tokens(folder, prompts, 8, strategy="prefix", kv_memory="4MiB",
                              mamba_cache_mode="none")
    assert [s.cached_prompt_tokens for s in seqs] == [0, 0]
    assert got == hf_greedy(hf_model, prompts, 8)


def test_kvbench_run_on_a_granite_folder(granite, tmp_path, capsys):
    """`kvbench run --strategy paged` end to end: every request completes inside the
    --kv-memory arena, its state blocks counted as held without tokens (`internal`)."""
    folder, _ = granite
    assert main(["run", "--model", str(folder), "--strategy", "paged", "--workload",
                 "uniform", "--num-requests", "4", "--workload-param", "prompt_len=60",
                 "--workload-param", "output_len=8", "--kv-memory", "1MiB", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "kvbench_summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (4, 0)
    assert summary["memory"]["kv_budget_bytes"] == 2**20
    assert summary["memory"]["breakdown_mean"]["internal"] > 0


def test_fp8_accuracy_reference_prefills_the_state_through_chunks(granite):
    """The fp8 accuracy measurement prefills a sequence alone through a hand-built layout,
    its state in blocks past its KV: 100 tokens in 40-token chunks give transformers'
    logits."""
    from kvbench.session.fp8_accuracy import _logits

    folder, hf_model = granite
    executor = build_engine(EngineConfig(model=str(folder), device="cpu", strategy="paged",
                                         kv_memory="4MiB")).engine.executor
    prompt = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(_logits(executor, prompt, list(range(100)), 40), theirs,
                               atol=1e-4, rtol=1e-4)


def test_kvbench_run_fp8_measures_its_accuracy(granite, tmp_path, capsys):
    folder, _ = granite
    assert main(["run", "--model", str(folder), "--strategy", "fp8", "--workload", "uniform",
                 "--num-requests", "4", "--workload-param", "prompt_len=60",
                 "--workload-param", "output_len=8", "--kv-memory", "1MiB", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "kvbench_summary.json").read_text())
    assert summary["completed"] == 4
    assert summary["accuracy"]["num_requests_compared"] == 4


# tiny-granite-h as a Granite-4.0-H config.json (transformers' GraniteMoeHybridConfig keys)
TINY_GRANITE_H_CONFIG = {
    "model_type": "granitemoehybrid", "vocab_size": 2048, "hidden_size": 256,
    "intermediate_size": 688, "shared_intermediate_size": 688, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 2048,
    "layer_types": ["mamba", "attention", "mamba", "mamba"], "mamba_n_heads": 8,
    "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 64, "mamba_d_conv": 4,
    "mamba_expand": 2, "mamba_chunk_size": 64, "mamba_conv_bias": True,
    "mamba_proj_bias": False, "num_local_experts": 0, "position_embedding_type": "nope",
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_multiplier": 32**-0.5}


def test_tiny_preset_is_a_granite_config_and_transformers_model():
    """The CPU preset is what kvbench reads from its config.json, with transformers' model's
    parameter count; its dummy weights run a prefill."""
    from kvbench.models.config import ModelConfig
    from kvbench.models.presets import PRESETS

    preset = PRESETS["tiny-granite-h"]
    assert ModelConfig.from_hf_config(TINY_GRANITE_H_CONFIG, "tiny-granite-h") == preset
    fields = {k: v for k, v in TINY_GRANITE_H_CONFIG.items() if k != "model_type"}
    with torch.device("meta"):
        hf_model = transformers.GraniteMoeHybridForCausalLM(
            transformers.GraniteMoeHybridConfig(**fields))
    assert preset.num_parameters() == sum(p.numel() for p in hf_model.parameters())
    # seeded dummy weights (A_log, D, dt_bias drawn or zeroed as every weight): finite logits
    logits = reference_prefill_logits("tiny-granite-h", list(range(1, 150)))
    assert bool(torch.isfinite(logits).all()) and float(logits.std()) > 0


def test_engine_hf_refuses_it_in_one_line():
    from kvbench.execution.transformers_engine import to_transformers

    decoder, _ = load_model("tiny-granite-h")
    with pytest.raises(KvbenchInputError, match="does not run state-space hybrids"):
        to_transformers(decoder, "tiny-granite-h", torch.device("cpu"))


@pytest.mark.parametrize("options", [{}, {"batching": "vllm-v1", "async_scheduling": True}])
def test_prefix_hits_restore_state_checkpoints(granite, options):
    """`prefix` (vLLM's default `align`): greedy tokens equal transformers' with hits that
    copy a cached checkpoint into the running state, checkpoints copied from it; with async
    scheduling too (a step is scheduled before the last one's tokens are seen)."""
    folder, hf_model = granite
    check_state_prefix_hits(folder, hf_model, **options)


@pytest.mark.parametrize("strategy", ["hybrid", "hybrid-prefix", "contiguous", "prefix"])
def test_strategies_holding_the_state_match_transformers(granite, strategy):
    """The state where `strategy` holds it (`hybrid`: pages of its equal-page pool;
    `contiguous`: its range's last slots; `prefix`: a fork's state is a layout state copy)."""
    folder, hf_model = granite
    check_strategy_holds_state(folder, hf_model, strategy, 40, 120)


@pytest.mark.parametrize("strategy", ["prefix", "hybrid"])
def test_preemption_under_other_strategies_matches_transformers(granite, strategy):
    """As `test_preemption_matches_transformers` under `prefix` (`align`: a preempted
    sequence's checkpoints stay cached, its recompute may hit them) and `hybrid`."""
    folder, hf_model = granite
    prompts = random_prompts(3, 512, seed=2, min_len=180, max_len=200)
    got, seqs = engine_tokens(folder, prompts, 48, strategy=strategy, kv_memory="180KiB",
                              max_model_len=260)
    assert sum(s.preemptions for s in seqs) > 0
    assert got == hf_greedy(hf_model, prompts, 48)
