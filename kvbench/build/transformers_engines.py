"""`--engine hf`'s factory: kvbench's weights and model cache, transformers' `generate()`."""

from __future__ import annotations

from kvbench.build.engine_build import BuildContext, BuiltEngine, EnginePlan, EngineShape
from kvbench.build.model_executors import ModelExecutors
from kvbench.errors import KvbenchInputError
from kvbench.execution.transformers_engine import (
    HFGenerateEngine,
    import_transformers,
    to_transformers,
)
from kvbench.models.loader import parse_dtype
from kvbench.strategies import STRATEGIES


class TransformersEngines(ModelExecutors):
    """`--engine hf`: kvbench's weights (its loader and model cache), transformers' generate.

    An engine factory rather than an executor factory: transformers keeps its own KV cache, so
    there is no strategy, policy or arena to wire. A kvbench model already in the model cache
    under the same key is reused (and shares its tensors with the transformers model).
    """

    def plan(self, shape: EngineShape, context: BuildContext) -> EnginePlan:
        import_transformers()
        config = shape.config
        # transformers keeps its own cache whatever the strategy: only an fp8 cache asked for
        # by --kv-cache-dtype is refused, not one a strategy's name implies.
        if config.kv_cache_dtype != "auto" and STRATEGIES.get(config.strategy).kv_cache_dtype is None:
            raise KvbenchInputError("--engine hf has no fp8 KV cache: use --kv-cache-dtype auto")
        if config.kv_offload is not None:
            raise KvbenchInputError("--engine hf keeps transformers' own cache: it has no "
                                    "prefix cache to put a --kv-offload tier under")
        device, decoder = self.load(shape, context)
        # transformers' model over kvbench's tensors (what it cannot run is refused here)
        hf_model = to_transformers(decoder, config.model, device)
        dtype = parse_dtype(config.dtype)
        # No budget: transformers' cache grows as it needs, so only the lengths are checked.
        return EnginePlan(shape, device, hf_model, dtype,
                          shape.model_config.kv_bytes_per_token(dtype.itemsize), None)

    def build(self, plan: EnginePlan, context: BuildContext) -> BuiltEngine:
        config, model_config = plan.shape.config, plan.shape.model_config
        hf_model = plan.model
        engine = HFGenerateEngine(
            hf_model, device=plan.device, max_num_seqs=config.max_num_seqs,
            max_model_len=plan.shape.max_model_len,
            max_padded_len=model_config.max_position_embeddings,
            temperature=config.temperature, seed=config.seed,
            clock=context.clock,
        )
        attn = getattr(hf_model.config, "_attn_implementation", None) or "default"
        return plan.built(engine, f"transformers-{attn}")  # no budget: transformers' own cache
