"""Memory checked before it is taken: weights + activation peak + KV budget against what the
device has free (CPU: MemAvailable; CUDA: torch.cuda.mem_get_info).

Weights use `kvbench estimate`'s formula (`sizes.weights_bytes`), so the estimate and the
refusal never disagree. A run that does not fit is refused in one line naming the figures and
a way out before a byte of the model is allocated, rather than failing half-way through
building it or meeting the kernel's OOM killer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbench.core.host_memory import cpu_available_bytes
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.dtype_names import model_dtype_name
from kvbench.models.sizes import canonical_dtype, weights_bytes
from kvbench.units import format_bytes

if TYPE_CHECKING:  # torch only where a device is asked: the simulator sizes without it
    import torch

LOGITS_BYTES = 4  # the sampler's float32 logits

# device -> free bytes (None: unknown, the check is skipped)
AvailableFn = Callable[["torch.device"], int | None]


def activation_bytes_estimate(
    model: ModelConfig, max_num_batched_tokens: int, max_num_seqs: int, element_bytes: int
) -> int:
    """Estimated peak activation memory of one full-size prefill (what vLLM measures).

    The widest point of a decoder layer for `max_num_batched_tokens` tokens: the residual
    stream and its normed copy (2 x hidden), q, k and v (q_dim + 2 x kv_dim), and the MLP's
    gate, up and their product (3 x intermediate), in the model dtype; plus float32 logits for
    `max_num_seqs` sampled rows. Allocator slack, CUDA graphs and the CUDA context are not
    counted (`--gpu-memory-utilization` < 1 leaves room for them). Unvalidated.
    """
    q_dim = model.num_heads * model.head_dim
    kv_dim = model.num_kv_heads * model.head_dim
    per_token = 2 * model.hidden_size + q_dim + 2 * kv_dim + 3 * model.intermediate_size
    logits = max_num_seqs * model.vocab_size * LOGITS_BYTES
    return max_num_batched_tokens * per_token * element_bytes + logits


def profile_attention_bytes(model: ModelConfig, num_tokens: int, element_bytes: int) -> int:
    """What the CUDA memory profile's attention adds to a prefill of `num_tokens`
    (`kvbench.execution.kv_budget.profile_prefill`): K and V repeated to every query head,
    and the output with its reshaped copy (4 x q_dim a token; fused SDPA keeps no scores)."""
    return num_tokens * 4 * model.num_heads * model.head_dim * element_bytes


@dataclass(frozen=True)
class MemoryNeed:
    """The bytes one run takes on its device, by part."""

    model: str
    dtype: str  # canonical: fp32, bf16, fp16
    weights_bytes: int
    activation_bytes: int  # logits included
    kv_bytes: int
    logits_bytes: int = 0  # the sampler's logits: max_num_seqs x vocab x float32
    max_num_seqs: int = 1
    max_num_batched_tokens: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activation_bytes + self.kv_bytes


def memory_need(
    model: ModelConfig,
    dtype: str | torch.dtype,
    max_num_batched_tokens: int = 0,
    max_num_seqs: int = 1,
    kv_bytes: int = 0,
) -> MemoryNeed:
    """Weights at `dtype`, plus activations of a prefill of `max_num_batched_tokens`, plus KV."""
    name = canonical_dtype(str(dtype).removeprefix("torch."), ("fp32", "bf16", "fp16"))
    weights = weights_bytes(model, name)
    element = weights // model.num_parameters()
    activations = (
        activation_bytes_estimate(model, max_num_batched_tokens, max_num_seqs, element)
        + profile_attention_bytes(model, max_num_batched_tokens, element)
        if max_num_batched_tokens > 0
        else 0
    )
    logits = max_num_seqs * model.vocab_size * LOGITS_BYTES if max_num_batched_tokens > 0 else 0
    return MemoryNeed(model.name, name, weights, activations, kv_bytes, logits, max_num_seqs,
                      max_num_batched_tokens)


def available_bytes(device: torch.device) -> int | None:
    """Bytes the device can hand out now; None when it cannot be told."""
    if device.type == "cuda":
        # torch: only for a run that computes
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    return cpu_available_bytes()


def check_memory(
    need: MemoryNeed, device: torch.device, available: AvailableFn | None = None
) -> None:
    """Raise KvbenchInputError, naming the figures and a way out, when `need` does not fit.

    `available` tells the device's free bytes; `available_bytes` (looked up at call time, so a
    test can replace it) when None.
    """
    have = (available or available_bytes)(device)
    if have is None or need.total_bytes <= have:
        return
    where = "the GPU has" if device.type == "cuda" else "the machine has"
    parts = [f"weights {format_bytes(need.weights_bytes)}"]
    if need.activation_bytes:
        parts.append(f"activations ~{format_bytes(need.activation_bytes)}")
    if need.kv_bytes:
        parts.append(f"KV {format_bytes(need.kv_bytes)}")
    raise KvbenchInputError(
        f"model {need.model} in {model_dtype_name(need.dtype)} needs "
        f"{format_bytes(need.total_bytes)} "
        f"({' + '.join(parts)}) but {where} {format_bytes(have)} available; "
        f"{_way_out(need, have)}"
    )


def _way_out(need: MemoryNeed, have: int) -> str:
    ways = _size_limits_that_fit(need, have)
    if need.dtype == "fp32":
        half = need.total_bytes - need.weights_bytes // 2 - need.activation_bytes // 2
        if half <= have or not ways:
            ways.append(f"--dtype bfloat16 (needs ~{format_bytes(half)})")
    room_for_kv = have - (need.total_bytes - need.kv_bytes)
    if need.kv_bytes and room_for_kv > 0:
        ways.append(f"--kv-memory below {format_bytes(room_for_kv)}")
    if need.model != "tiny":
        ways.append("a smaller model (e.g. --model tiny)")
    return "use " + ", or ".join(ways) if ways else "free some memory first"


def _size_limits_that_fit(need: MemoryNeed, have: int) -> list[str]:
    """`--max-num-seqs` or `--max-num-batched-tokens` at a value that fits, when the one
    that option sizes is the largest part of the need (the flag at fault, named first)."""
    token_bytes = need.activation_bytes - need.logits_bytes
    parts = {"logits": need.logits_bytes, "tokens": token_bytes,
             "other": need.weights_bytes + need.kv_bytes}
    largest = max(parts, key=parts.__getitem__)
    if largest == "other":
        return []
    room = have - (need.total_bytes - parts[largest])
    if largest == "logits":
        per_seq = need.logits_bytes // max(1, need.max_num_seqs)
        fits = room // per_seq if per_seq else 0
        flag, value = "--max-num-seqs", need.max_num_seqs
    else:
        per_token = token_bytes // max(1, need.max_num_batched_tokens)
        fits = room // per_token if per_token else 0
        flag, value = "--max-num-batched-tokens", need.max_num_batched_tokens
    if fits < 1:
        return [f"a smaller {flag} (the {value:,} given need most of it)"]
    return [f"{flag} {fits:,} or less (the {value:,} given need most of it)"]
