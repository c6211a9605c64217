"""fp8 KV-cache agreement on a model whose logits are not flat.

Random-weight models have nearly flat logits, so greedy agreement on them understates what a
trained model keeps under an fp8 cache. Here a tiny Llama is trained for a few seconds on a
copy task (a random "key" of 3..12 distinct tokens, repeated; the period is drawn per
sequence), which it can only solve by attending back over the context to the previous
occurrence of the current token (an induction head). Once trained, its next token is well
determined, so agreement between the fp8 and the unquantized cache measures something.
"""

from __future__ import annotations

import json
import random
import time

import pytest
import torch
import torch.nn.functional as F

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.models.config import ModelConfig
from kvbench.models.llama import LlamaDecoder
from kvbench.models.loader import load_model
from kvbench.session.fp8_accuracy import measure_fp8_accuracy

# Training takes 5-7 s on a quiet core and over 20 s on a busy one.
pytestmark = pytest.mark.slow

VOCAB = 64
SEQ_LEN = 48  # training length; prompt + output of the measured requests stay within it
BATCH = 16
MIN_PERIOD, MAX_PERIOD = 3, 12
LR = 3e-3
# The loss plateaus near 2.5, then drops suddenly once induction heads form (after ~250-400
# steps); with 7 training seeds it reached STOP_LOSS after 480-650 steps (~5-7 s on one core).
MAX_STEPS = 1000
STOP_LOSS = 0.01  # stop once the mean loss of the last 10 steps is below this
OUTPUT_LEN = 24

CONFIG = ModelConfig(
    name="copy-task",
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=256,
)


def _copy_sequence(rng: random.Random, length: int) -> tuple[list[int], int]:
    """A key of `period` distinct tokens repeated to `length` tokens, and the period.

    Tokens from position `period + 1` on are determined by the context (the token after
    the previous occurrence of the current one); the first `period + 1` are not.
    """
    period = rng.randint(MIN_PERIOD, MAX_PERIOD)
    key = rng.sample(range(VOCAB), period)
    return (key * (length // period + 1))[:length], period


def _batch(rng: random.Random, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids `[size, SEQ_LEN]` and a mask of the targets that are predictable."""
    seqs, periods = zip(*(_copy_sequence(rng, SEQ_LEN) for _ in range(size)), strict=True)
    ids = torch.tensor(seqs)
    predictable = torch.arange(SEQ_LEN)[None, :] > torch.tensor(periods)[:, None]
    return ids, predictable


def _causal_attention(batch: int, seq_len: int):
    """Attention for `batch` equal-length sequences flattened to `[batch * seq_len]` tokens."""

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        num_heads, num_kv_heads = q.shape[1], k.shape[1]

        def split(x: torch.Tensor) -> torch.Tensor:  # [T, H, D] -> [B, H, S, D]
            return x.view(batch, seq_len, x.shape[1], x.shape[2]).transpose(1, 2)

        group = num_heads // num_kv_heads
        out = F.scaled_dot_product_attention(
            split(q),
            split(k).repeat_interleave(group, dim=1),
            split(v).repeat_interleave(group, dim=1),
            is_causal=True,
        )
        return out.transpose(1, 2).reshape(batch * seq_len, num_heads, q.shape[2])

    return attend


def _logits(model: LlamaDecoder, ids: torch.Tensor) -> torch.Tensor:
    """Logits `[batch, seq, vocab]` of equal-length sequences `ids [batch, seq]`."""
    batch, seq_len = ids.shape
    positions = torch.arange(seq_len).repeat(batch)
    hidden = model(ids.flatten(), positions, _causal_attention(batch, seq_len))
    return model.logits(hidden).view(batch, seq_len, -1)


def _next_token_accuracy(model: LlamaDecoder, seed: int, count: int = 64) -> float:
    """Greedy next-token accuracy on the predictable targets of held-out sequences."""
    ids, predictable = _batch(random.Random(seed), count)
    with torch.no_grad():
        guess = _logits(model, ids)[:, :-1].argmax(-1)
    return float((guess == ids[:, 1:])[predictable[:, 1:]].float().mean())


def _train() -> tuple[LlamaDecoder, dict]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # PyTorch's default init (not kvbench's std-0.02 dummy weights, with which the loss
        # plateaus far longer)
        model = LlamaDecoder(CONFIG)
    rng = random.Random(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses: list[float] = []
    start = time.perf_counter()
    for _ in range(MAX_STEPS):
        ids, predictable = _batch(rng, BATCH)
        logits = _logits(model, ids)[:, :-1]
        mask = predictable[:, 1:]
        loss = F.cross_entropy(logits[mask], ids[:, 1:][mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) >= 10 and sum(losses[-10:]) / 10 < STOP_LOSS:
            break
    model.eval()
    stats = {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10,
             "train_s": time.perf_counter() - start}
    return model, stats


def _save_hf_folder(model: LlamaDecoder, folder) -> None:
    from safetensors.torch import save_file

    c = model.config
    hf_config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2))
    # state_dict() leaves out the non-persistent RoPE buffer; names already match HF's
    weights = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
    save_file(weights, str(folder / "model.safetensors"))


def _copy_requests(count: int, seed: int) -> list[Request]:
    """Prompts of the training pattern: the key and 1..period tokens of its repetition (so
    the continuation is determined), `OUTPUT_LEN` tokens to generate."""
    rng = random.Random(seed)
    requests = []
    for i in range(count):
        seq, period = _copy_sequence(rng, SEQ_LEN)
        prompt_len = period + rng.randint(1, period)
        assert prompt_len + OUTPUT_LEN <= SEQ_LEN
        requests.append(Request(request_id=i, arrival_s=0.0,
                                prompt_token_ids=tuple(seq[:prompt_len]), output_len=OUTPUT_LEN))
    return requests


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model, stats = _train()
    folder = tmp_path_factory.mktemp("copy-task-llama")
    _save_hf_folder(model, folder)
    return model, stats, folder


def _measured(config: EngineConfig, requests: list[Request], sample_size: int) -> dict:
    """The accuracy section of a run of `requests` on the engine of `config`."""
    built = build_engine(config, model_cache={})
    for request in requests:
        built.engine.add_request(request)
    built.engine.run_to_completion()
    return measure_fp8_accuracy(built, config, requests, sample_size)


def test_training_learned_the_copy_task(trained):
    model, stats, _ = trained
    # fails loudly if training silently did not work (the loss plateaus near 2.5 before the
    # induction heads form; the trained model reaches 0.998)
    accuracy = _next_token_accuracy(model, seed=99)
    assert accuracy > 0.95, (accuracy, stats)


def test_saved_folder_loads_back_unchanged(trained):
    model, _, folder = trained
    loaded, config = load_model(str(folder))
    assert config.num_kv_heads == 2 and not config.tie_word_embeddings
    ids, _ = _batch(random.Random(5), 2)
    with torch.no_grad():
        torch.testing.assert_close(_logits(loaded, ids), _logits(model, ids))


def test_fp8_greedy_agreement_on_trained_model_is_high(trained):
    _, stats, folder = trained
    assert stats["final_loss"] < 0.2, f"training did not converge: {stats}"
    requests = _copy_requests(16, seed=7)
    config = EngineConfig(model=str(folder), strategy="fp8", dtype="float32", kv_memory="4MiB",
                          max_model_len=SEQ_LEN)
    acc = _measured(config, requests, sample_size=8)
    assert acc["num_requests_compared"] == 16
    assert acc["num_tokens_compared"] == 16 * OUTPUT_LEN
    # Measured (torch 2.13 CPU, this seed): greedy agreement 1.0 prefix and overall; mean
    # prefill logit error 0.089 (max 1.30, 5% of the mean |logit| 1.87) against a mean
    # top-1/top-2 margin of 5.3. With 6 other training seeds and 2 request sets, agreement
    # ranged 0.956-1.0: a greedy step whose margin is ~1 logit (rare, late in a period) is
    # within reach of fp8's largest errors and can flip. 0.9 allows for such a flip or two
    # with another torch build's training trajectory; a broken cache scrambles continuations
    # wholesale (a random guess agrees 1/64).
    assert acc["greedy_agreement_prefix"] >= 0.9, acc
    assert acc["greedy_agreement_overall"] >= 0.9, acc
    # Prefill top-1 agreement measured 0.977 (0.94-1.0 over the other seeds): the rows that
    # flip are all inside the first key, whose next token the context does not determine
    # (near-flat logits over the unseen tokens); where the model is sure, nothing flips.
    assert acc["prefill_top1_agreement"] >= 0.9, acc
    assert acc["prefill_top1_agreement_by_margin_quartile"][-1] == 1.0, acc
    # e4m3 keeps logits within a few percent of their scale (measured 5%)
    assert 0 < acc["prefill_logit_abs_err_mean"] < 0.1 * acc["prefill_logit_abs_mean"], acc
    # Contrast with random weights: the `tiny` preset's mean margin is 0.083 on these four
    # short requests (64x smaller than 5.3), its prefill top-1 agreement 0.875 and greedy
    # prefix agreement 0.75 with a mean logit error of only 0.010: its greedy choices are
    # near-ties that fp8 flips; the trained model's determined tokens are not.
    random_acc = _measured(
        EngineConfig(strategy="fp8", kv_memory="4MiB"),
        [Request(i, 0.0, tuple(range(10 * i + 1, 10 * i + 17)), 4) for i in range(4)],
        sample_size=4,
    )
    assert acc["prefill_top1_margin_mean"] > 20 * random_acc["prefill_top1_margin_mean"], (
        acc, random_acc)
