"""Attention and KV-write kernels: PyTorch reference (CPU path, ground truth) and Triton (GPU path).

Every kernel reads the KV arena of one layer as two tensors `k_cache`, `v_cache` of shape
`[num_slots, num_kv_heads, head_dim]`. A paged cache addresses slot
`block_table[pos // block_size] * block_size + pos % block_size`; a contiguous cache addresses
slot `start_slot + pos`. fp8 caches (`torch.float8_e4m3fn`) hold `value / scale` and are
dequantized on load with per-layer (scalar) or per-KV-head scales. Latent attention (MLA) has
one cache tensor `[num_slots, 1, kv_lora_rank + rope_dim]` and passes
`v_cache = k_cache[..., :kv_lora_rank]`: the values are the latent part of each key row.
"""

if __name__ == "kernels":
    # Imported by its bare name, not as kvbench.kernels: the repository root is on sys.path
    # (`python -m pytest`, pytest's `pythonpath`, a notebook started there), so this folder
    # shadows the installed distribution of that name, Hugging Face's `kernels`, which
    # transformers imports with every model. Load the installed one in this one's place, or
    # fail as if this folder were not there.
    import sys
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec
    from pathlib import Path

    _repository_root = Path(__file__).resolve().parent.parent
    _spec = PathFinder.find_spec(
        __name__, [p for p in sys.path if Path(p or ".").resolve() != _repository_root]
    )
    if _spec is None or _spec.loader is None:
        raise ModuleNotFoundError(f"No module named {__name__!r}", name=__name__)
    _installed = module_from_spec(_spec)
    sys.modules[__name__] = _installed
    _spec.loader.exec_module(_installed)
