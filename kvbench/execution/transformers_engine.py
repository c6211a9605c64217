"""`--engine hf`: the same workload replayed through Hugging Face transformers' `generate()`.

The baseline a user would pick instead of a serving engine: static batches of up to
`--max-num-seqs` requests, first come first served, each one left-padded `model.generate()`
call with transformers' own KV cache (`DynamicCache`), on kvbench's weights, device and dtype.
As a `BaseEngine` it gives the runner the same results files and metrics:

- Every member generates `max(output_len)` tokens of its batch (`eos_token_id=None`) and
  keeps its first `output_len`; greedy by default, `--temperature` samples with
  transformers' sampler (seeded per batch, so its tokens differ from kvbench's).
- Token times come from a streamer (TTFT, TPOT, ITL); a request finishes at its own last
  token, but its row computes (and holds cache) until the batch ends.
- `steps.csv` has a row per model forward (the prefill, then each decode step);
  `overhead_ms` is the step's time outside the forward (timed by forward hooks).
- No memory split (transformers' cache has no arena): the `kv_*_bytes` columns are NaN and
  `kv_budget_bytes` / `kv_capacity_tokens` null; on CUDA `peak_gpu_bytes` still shows it.
- A batch ends before the first queued request that would pad a row past the model's
  positions (longest prompt + longest output); `prefill_tokens_computed` counts the padded
  prompt tokens the prefill really computes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from kvbench.core.clock import RunClock
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence, SequenceStatus
from kvbench.core.step_record import StepRecord
from kvbench.core.step_times import add_step_range
from kvbench.engine.base_engine import BaseEngine
from kvbench.engine.engine import check_request_lengths
from kvbench.errors import KvbenchInputError, optional_import
from kvbench.models.config import ModelConfig
from kvbench.models.llama import LlamaDecoder
from kvbench.models.presets import PRESETS
from kvbench.scheduling.queue_order import WaitingQueue
from kvbench.tracing import trace_range

PAD_TOKEN_ID = 0  # any valid id: padded positions are masked and their outputs dropped
# The step columns of a KV arena, which transformers' cache does not have.
NO_ARENA = dict.fromkeys(("kv_token_bytes", "kv_reserved_bytes", "kv_internal_bytes",
                          "kv_external_bytes", "kv_free_bytes", "kv_cached_bytes"), math.nan)


def import_transformers():
    return optional_import("transformers", "--engine hf")  # (only for --engine hf)


class _TokenTimes:
    """A `generate()` streamer that records when each step's tokens are out (not the tokens)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # the first call hands over the prompt ids
            self._prompt_seen = True
            return
        self.times.append(self.clock())

    def end(self) -> None:
        pass


class _ForwardTimer:
    """Start and end time of every forward of the model, from module hooks."""

    def __init__(self, model: torch.nn.Module, clock: Callable[[], float], device) -> None:
        self.clock = clock
        self.device = device
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._before),
            model.register_forward_hook(self._after),
        ]

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return self.clock()

    def _before(self, *_args) -> None:
        self._start = self._now()

    def _after(self, *_args) -> None:
        self.spans.append((self._start, self._now()))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class _Batch:
    """What the runner reads from `engine.policy`: the sequences of the batch in flight."""

    def __init__(self) -> None:
        self.running: list[Sequence] = []
        self.waiting = WaitingQueue()  # first come, first served

    def holders(self) -> list[Sequence]:
        return self.running

    def has_work(self) -> bool:
        return bool(self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.push(seq)


class HFGenerateEngine(BaseEngine):
    """Static batches through `model.generate()`; one `step()` runs one whole batch."""

    strategy = None  # no kvbench cache strategy: transformers manages its own KV cache

    def __init__(
        self,
        model,
        *,
        device: torch.device,
        max_num_seqs: int,
        max_model_len: int,
        max_padded_len: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        clock: RunClock | None = None,
    ) -> None:
        super().__init__(max_model_len=max_model_len, temperature=temperature, seed=seed,
                         clock=clock)
        self.model = model
        self.device = device
        self.max_num_seqs = max_num_seqs
        # The longest padded row a batch may have: the model's positions (transformers warns
        # past them), max_model_len when not given.
        self.max_padded_len = max_padded_len or max_model_len
        self.policy = _Batch()
        self._batches = 0

    # Requests ---------------------------------------------------------------------------

    def check_request(self, request: Request) -> None:
        check_request_lengths(request, self.max_model_len)

    def add_request(self, request: Request, checked: bool = False) -> None:
        """Queue the request; `n > 1` samples become `n` rows of a batch."""
        if not checked:
            self.check_request(request)
        group = [self._new_sequence(request, i) for i in range(request.n)]
        self.sequences[request.request_id] = group
        for seq in group:
            self.policy.add(seq)
        self._unfinished += request.n

    # One batch --------------------------------------------------------------------------

    def step(self) -> list[Sequence]:
        """Run the next static batch through `generate()`; returns its sequences (all finish)."""
        if not self.waiting:
            return []
        batch = self._next_batch()
        t_start = self.clock()
        for seq in batch:
            seq.status = SequenceStatus.RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = t_start
        self.policy.running = batch
        width = max(seq.prompt_len for seq in batch)
        new_tokens = max(seq.request.output_len for seq in batch)
        input_ids = torch.full((len(batch), width), PAD_TOKEN_ID, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):  # left padding, as decoder-only generation needs
            input_ids[row, width - seq.prompt_len :] = torch.tensor(seq.token_ids)
            mask[row, width - seq.prompt_len :] = 1
        streamer = _TokenTimes(self.clock)
        timer = _ForwardTimer(self.model, self.clock, self.device)
        if self.temperature > 0:
            torch.manual_seed(self.seed * 1_000_003 + self._batches)
        self._batches += 1
        try:
            with trace_range("generate", seqs=len(batch), new_tokens=new_tokens), \
                    torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=self._generation_config(new_tokens),
                    streamer=streamer,
                )
        finally:
            timer.remove()
        t_end = self.clock()
        generated = out[:, width:].cpu()
        if generated.shape[1] != new_tokens or len(streamer.times) != new_tokens:
            raise RuntimeError(
                f"generate() returned {generated.shape[1]} tokens per row and streamed "
                f"{len(streamer.times)} steps, {new_tokens} were asked for"
            )
        first = len(self.step_times)  # the streamed steps' ends, shared by every row
        self.step_times.ends.extend(streamer.times)
        for row, seq in enumerate(batch):
            n = seq.request.output_len
            seq.token_ids.extend(generated[row, :n].tolist())
            add_step_range(seq.token_steps, first, first + n)
            seq.num_computed = len(seq.token_ids) - 1
            seq.first_token_s = streamer.times[0]
            seq.finish_s = streamer.times[n - 1]
            seq.status = SequenceStatus.FINISHED
        self._record_steps(batch, width, timer.spans, t_start, t_end)
        self.prefill_tokens_computed += len(batch) * width
        self.policy.running = []
        self._unfinished -= len(batch)
        return batch

    def _next_batch(self) -> list[Sequence]:
        """Up to `max_num_seqs` queued sequences, first come first served, ending before the
        first one that would pad the batch past the model's positions: every row of a
        left-padded `generate()` batch holds the longest prompt plus the longest output."""
        batch = [self.waiting.pop()]
        width, new_tokens = batch[0].prompt_len, batch[0].request.output_len
        while len(batch) < self.max_num_seqs and self.waiting:
            head = self.waiting.head()
            width_then = max(width, head.prompt_len)
            new_then = max(new_tokens, head.request.output_len)
            if width_then + new_then > self.max_padded_len:
                break
            batch.append(self.waiting.pop())
            width, new_tokens = width_then, new_then
        return batch

    def _generation_config(self, new_tokens: int):
        transformers = import_transformers()
        sampling = self.temperature > 0
        return transformers.GenerationConfig(
            max_new_tokens=new_tokens,
            min_new_tokens=0,
            do_sample=sampling,
            temperature=self.temperature if sampling else 1.0,
            top_k=0 if sampling else None,
            top_p=1.0,
            num_beams=1,
            use_cache=True,
            eos_token_id=None,  # output lengths are fixed by the workload: never stop early
            pad_token_id=PAD_TOKEN_ID,
            bos_token_id=None,
        )

    def _record_steps(
        self, batch: list[Sequence], width: int, spans: list[tuple[float, float]],
        t_start: float, t_end: float,
    ) -> None:
        """One `StepRecord` per forward: from its start (the first: from the call) to the next."""
        size = len(batch)
        lengths = [seq.request.output_len for seq in batch]
        for i, (f_start, f_end) in enumerate(spans):
            begin = t_start if i == 0 else f_start
            end = spans[i + 1][0] if i + 1 < len(spans) else t_end
            step_ms = (end - begin) * 1e3
            prefill = i == 0
            self.step_recorder.keep(StepRecord(
                step=self.step_recorder.num_steps,
                t_s=begin,
                step_ms=step_ms,
                overhead_ms=max(0.0, step_ms - (f_end - f_start) * 1e3),
                num_prefill_seqs=size if prefill else 0,
                num_decode_seqs=0 if prefill else size,
                num_batched_tokens=size * width if prefill else size,
                num_prefill_tokens=size * width if prefill else 0,
                num_running=sum(1 for n in lengths if n > i),
                num_waiting=len(self.waiting),
                preemptions=0,
                kv_utilization=None,
                **NO_ARENA,
            ))


def hf_config_for(model_config: ModelConfig, model: str):
    """The transformers config of the same model: the folder's own, or one made for a preset."""
    transformers = import_transformers()
    if model not in PRESETS:
        return transformers.AutoConfig.from_pretrained(model)
    c = model_config
    if c.sliding_window is not None:
        raise KvbenchInputError(
            f"--engine hf builds presets without sliding windows, and {model} has a "
            f"{c.sliding_window}-token window; use --engine kvbench"
        )
    common = dict(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        max_position_embeddings=c.max_position_embeddings,
        rope_theta=c.rope_theta,
        rms_norm_eps=c.rms_norm_eps,
        tie_word_embeddings=c.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    if c.rope_scaling:
        common["rope_scaling"] = dict(c.rope_scaling)
    if c.qk_norm:  # per-head q/k norms: Qwen3's layout
        return transformers.Qwen3Config(**common, attention_bias=False, use_sliding_window=False)
    if c.attention_bias:  # q/k/v biases and no o_proj bias: Qwen2's layout, as kvbench's
        return transformers.Qwen2Config(**common, use_sliding_window=False)
    return transformers.LlamaConfig(**common, attention_bias=False, mlp_bias=False)


def to_transformers(decoder: LlamaDecoder, model: str, device: torch.device):
    """A transformers `*ForCausalLM` holding the very tensors of kvbench's `decoder`.

    Built on the meta device and given the decoder's parameters (`assign=True`: no copy, no
    random init), then its rotary embedding is rebuilt on the device.
    """
    if decoder.config.mla is not None:
        raise KvbenchInputError(
            f"model {model}: --engine hf does not run latent-attention (DeepSeek) models; "
            "use --engine kvbench"
        )
    if decoder.config.hybrid is not None:
        raise KvbenchInputError(
            f"model {model}: --engine hf does not run state-space hybrids (its cache would be "
            "transformers' own, not a KV arena); use --engine kvbench")
    if decoder.config.is_moe:
        # transformers holds each layer's experts in one fused tensor: sharing kvbench's
        # per-expert tensors would take a copy of every expert, past the memory check.
        raise KvbenchInputError(
            f"model {model}: --engine hf does not run mixture-of-experts models "
            f"({decoder.config.num_local_experts} experts a layer); use --engine kvbench"
        )
    transformers = import_transformers()
    hf_config = hf_config_for(decoder.config, model)
    with torch.device("meta"):
        hf_model = transformers.AutoModelForCausalLM.from_config(hf_config)
    state = decoder.state_dict()
    missing, unexpected = hf_model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (k == "lm_head.weight" and hf_config.tie_word_embeddings)]
    if missing or unexpected:
        raise KvbenchInputError(
            f"model {model}: transformers and kvbench weights differ "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    if getattr(hf_config, "tie_word_embeddings", False):
        hf_model.lm_head.weight = hf_model.model.embed_tokens.weight
    rotary = hf_model.model.rotary_emb
    with torch.device(device):
        hf_model.model.rotary_emb = type(rotary)(config=hf_model.config)
    on_meta = [n for n, t in itertools.chain(hf_model.named_parameters(),
                                             hf_model.named_buffers()) if t.is_meta]
    if on_meta:
        raise RuntimeError(f"transformers model left on the meta device: {on_meta[:3]}")
    hf_model.generation_config = transformers.GenerationConfig(
        eos_token_id=None, bos_token_id=None, pad_token_id=PAD_TOKEN_ID
    )
    return hf_model.to(device).eval()
