"""`--engine hf`'s factory: kvbench's weights and model cache, transformers' `generate()`."""

from __future__ import annotations

import torch

from kvbench.build.engine_build import BuildContext, BuiltEngine, resolve_lengths
from kvbench.build.model_executors import ModelExecutors
from kvbench.config import EngineConfig
from kvbench.core.clock import RunClock
from kvbench.errors import KvbenchInputError
from kvbench.execution.transformers_engine import (
    HFGenerateEngine,
    import_transformers,
    to_transformers,
)
from kvbench.models.loader import parse_dtype


class TransformersEngines(ModelExecutors):
    """`--engine hf`: kvbench's weights (its loader and model cache), transformers' generate.

    An engine factory rather than an executor factory: transformers keeps its own KV cache, so
    there is no strategy, policy or arena to wire. A kvbench model already in the model cache
    under the same key is reused (and shares its tensors with the transformers model).
    """

    def build(self, config: EngineConfig, context: BuildContext) -> BuiltEngine:
        import_transformers()
        if config.kv_cache_dtype not in ("auto",):
            raise KvbenchInputError("--engine hf has no fp8 KV cache: use --kv-cache-dtype auto")
        device, decoder, model_config = self.load(config, context)
        max_model_len, _ = resolve_lengths(config, model_config)  # same checks as kvbench's
        hf_model = to_transformers(decoder, config.model, device)
        engine = HFGenerateEngine(
            hf_model, device=device, max_num_seqs=config.max_num_seqs,
            max_model_len=max_model_len,
            max_padded_len=model_config.max_position_embeddings,
            temperature=config.temperature, seed=config.seed,
            clock=context.clock,
        )
        element = torch.empty((), dtype=parse_dtype(config.dtype)).element_size()
        attn = getattr(hf_model.config, "_attn_implementation", None) or "default"
        return BuiltEngine(
            engine=engine,
            model_config=model_config,
            device=device,
            kv_budget_bytes=None,  # transformers' cache grows as it needs: no budget is enforced
            kv_dtype=parse_dtype(config.dtype),
            bytes_per_slot=model_config.kv_bytes_per_token(element),
            backend=f"transformers-{attn}",
            max_model_len=max_model_len,
        )


def build_hf_engine(
    config: EngineConfig,
    clock: RunClock | None = None,
    model_cache: dict | None = None,
) -> BuiltEngine:
    """The transformers baseline engine of `config` (`kvbench.build.engines.build_engine` with
    `TransformersEngines()`)."""
    return TransformersEngines().build(config, BuildContext(clock=clock, model_cache=model_cache))
