"""vLLM v1's own `Scheduler` (or `AsyncScheduler`) and `KVCacheManager`, stepped through a
trace the way vLLM's unit tests drive them (tests/v1/core/utils.py, `create_scheduler`): a
folder holding only a `config.json`, a `KVCacheConfig` built by hand (one group per kvbench
allocation group, all drawing from one pool), and a fake `ModelRunnerOutput` per step that
samples one token (id 0, what kvbench's simulated executor samples) for every scheduled
request that finished its prefill; EOS is never produced, requests finish by `max_tokens`.

A step is one `schedule()` call. Synchronously its output is processed at once; with async
scheduling the loop is vLLM's `EngineCore.step_with_batch_queue` with a queue of two: step
n + 1 is scheduled before step n's output is processed.

vLLM's CPU platform hook (`CpuPlatform.check_and_update_config`) configures a CPU model
runner: it demands triton-cpu (not on PyPI) and turns async scheduling off because the CPU
runner does not need it. Neither concerns the scheduler, so the hook is skipped while the
`VllmConfig` is built: the scheduler then runs as configured, as on a GPU.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from dataclasses import replace
from unittest import mock

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tests.vllm_oracle.kvbench_side import Allocation  # noqa: E402
from tests.vllm_oracle.step_log import StepLog  # noqa: E402
from tests.vllm_oracle.traces import Trace  # noqa: E402

MAX_STEPS = 20_000
SAMPLED_TOKEN = 0

_CONFIG_JSON = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "vocab_size": 2048, "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}
_model_dir: str | None = None
_hash_ready = False


def model_dir(max_model_len: int) -> str:
    """A folder holding only a config.json (vLLM reads nothing else without weights)."""
    global _model_dir
    if _model_dir is None:
        _model_dir = tempfile.mkdtemp(prefix="vllm-oracle-model-")
        with open(os.path.join(_model_dir, "config.json"), "w") as f:
            json.dump({**_CONFIG_JSON, "max_position_embeddings": 8192}, f)
    return _model_dir


def _skip_platform_hook():
    return mock.patch.object(type(current_platform), "check_and_update_config",
                             classmethod(lambda cls, config: None))


def build(trace: Trace, prefix_caching: bool, windows: tuple[int | None, ...],
          state_groups: int = 0) -> Scheduler:
    model_config = ModelConfig(model=model_dir(trace.max_model_len), dtype="bfloat16", seed=0,
                               skip_tokenizer_init=True, max_model_len=trace.max_model_len)
    scheduler_config = SchedulerConfig(
        max_num_seqs=trace.max_num_seqs, max_num_batched_tokens=trace.max_num_batched_tokens,
        max_model_len=trace.max_model_len, enable_chunked_prefill=True,
        async_scheduling=trace.async_scheduling, is_encoder_decoder=False,
        watermark=trace.watermark,
    )
    # A state-space hybrid with prefix caching runs vLLM's default mode for it, `align`
    # (`MambaModelConfig.verify_and_update_config`); without, `none`.
    mamba_mode = "align" if state_groups and prefix_caching else "none"
    cache_config = CacheConfig(block_size=trace.block_size, gpu_memory_utilization=0.9,
                               cache_dtype="auto", enable_prefix_caching=prefix_caching,
                               mamba_cache_mode=mamba_mode)
    with _skip_platform_hook():
        vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                                 cache_config=cache_config)
    groups = []
    for g, window in enumerate(windows):
        spec = (FullAttentionSpec(block_size=trace.block_size, num_kv_heads=1, head_size=1,
                                  dtype=torch.float32) if window is None else
                SlidingWindowSpec(block_size=trace.block_size, num_kv_heads=1, head_size=1,
                                  dtype=torch.float32, sliding_window=window))
        groups.append(KVCacheGroupSpec([f"layer.{g}"], spec))
    # A state group's page is padded to the attention page, as vLLM's
    # `_align_hybrid_block_size` makes them equal: one float32 vector of the page's size.
    # Its block is the attention block in `align` (`_align_hybrid_block_size`), the one
    # mode driven here (`none`'s, max_model_len, needs the engine's scheduler block).
    page_floats = groups[0].kv_cache_spec.page_size_bytes // 4
    for g in range(state_groups):
        spec = MambaSpec(block_size=trace.block_size, shapes=((page_floats,),),
                         dtypes=(torch.float32,), mamba_cache_mode=mamba_mode)
        groups.append(KVCacheGroupSpec([f"state.{g}"], spec))
    num_blocks = trace.num_blocks + 1  # block 0 is vLLM's null block
    kv_cache_config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                    kv_cache_groups=groups)
    cache_config.num_gpu_blocks = num_blocks
    cls = AsyncScheduler if trace.async_scheduling else Scheduler
    return cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
               structured_output_manager=StructuredOutputManager(vllm_config),
               block_size=trace.block_size, log_stats=False)


def _request(rid: int, prompt: tuple[int, ...], output_len: int, arrival: float,
             block_size: int) -> Request:
    global _hash_ready
    if not _hash_ready:
        init_none_hash(sha256)
        _hash_ready = True
    return Request(request_id=str(rid), prompt_token_ids=list(prompt),
                   sampling_params=SamplingParams(max_tokens=output_len, ignore_eos=True),
                   pooling_params=None, arrival_time=arrival,
                   block_hasher=get_request_block_hasher(block_size, sha256))


def run(trace: Trace, prefix_caching: bool, allocation: Allocation) -> list[StepLog]:
    """`allocation`: kvbench's pool for the trace's model and strategy (its groups, and the
    block a state-space hybrid raises, which vLLM's `_align_hybrid_block_size` raises alike:
    tests/vllm_oracle/test_state_block_size.py)."""
    trace = replace(trace, block_size=allocation.block_size)
    scheduler = build(trace, prefix_caching, allocation.windows, allocation.state_groups)
    pool = scheduler.kv_cache_manager.block_pool
    pending = sorted(trace.requests, key=lambda r: (r.arrival_step, r.rid))
    requests: dict[int, Request] = {}
    had_token: set[int] = set()
    done: set[int] = set()
    in_flight: deque = deque()  # (scheduler output, the requests that sample)
    depth = 2 if trace.async_scheduling else 1
    logs: list[StepLog] = []
    for step in range(MAX_STEPS):
        while pending and pending[0].arrival_step == step:
            r = pending.pop(0)
            requests[r.rid] = _request(r.rid, r.prompt, r.output_len, float(step),
                                       trace.block_size)
            scheduler.add_request(requests[r.rid])
        if len(done) == len(trace.requests):
            break
        if len(done) == len(requests) and not in_flight:
            logs.append(StepLog(step, (), (), (), 0, (), ()))
            continue
        scheduled, admitted, preempted = (), (), ()
        if scheduler.has_requests():
            running_before = [int(r.request_id) for r in scheduler.running]
            preemptions = {rid: r.num_preemptions for rid, r in requests.items()}
            out = scheduler.schedule()
            scheduled = tuple(
                (int(rid), n, requests[int(rid)].num_computed_tokens - n)
                for rid, n in out.num_scheduled_tokens.items())
            new = {int(r.req_id) for r in out.scheduled_new_reqs}
            admitted = tuple((rid, computed) for rid, _, computed in scheduled if rid in new)
            victims = {rid for rid, r in requests.items() if r.num_preemptions > preemptions[rid]}
            preempted = tuple(rid for rid in reversed(running_before) if rid in victims)
            samplers = [rid for rid in out.num_scheduled_tokens
                        if not scheduler.requests[rid].is_prefill_chunk]
            in_flight.appendleft((out, samplers))
            if len(in_flight) < depth and (out.total_num_scheduled_tokens > 0
                                           or scheduler.has_requests()):
                in_flight_done = False
            else:
                in_flight_done = True
        else:
            in_flight_done = bool(in_flight)
        if in_flight_done:
            out, samplers = in_flight.pop()
            ids = list(out.num_scheduled_tokens)
            sampled = [[SAMPLED_TOKEN] if rid in samplers else [] for rid in ids]
            scheduler.update_from_output(out, ModelRunnerOutput(req_ids=ids,
                                                                sampled_token_ids=sampled))
        first = tuple(sorted(rid for rid, r in requests.items()
                             if rid not in had_token and r.num_output_tokens > 0))
        had_token.update(first)
        finished = tuple(sorted(rid for rid, r in requests.items()
                                if rid not in done and r.is_finished()))
        done.update(finished)
        logs.append(StepLog(
            step=step, scheduled=scheduled, admitted=admitted, preempted=preempted,
            blocks_held=trace.num_blocks - pool.get_num_free_blocks(),
            first_token=first, finished=finished,
        ))
    return logs
