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
    # shadows any installed package of that name, such as Hugging Face's `kernels`, which
    # transformers 5.25 imports with every model. Load that one in this one's place. Without
    # one, this folder stays what the import found (transformers before 5.25 probes the name,
    # reads no version and goes on).
    import sys
    from importlib.machinery import ModuleSpec, PathFinder
    from importlib.util import module_from_spec
    from pathlib import Path

    _repository_root = Path(__file__).resolve().parent.parent

    def _elsewhere(entry: object) -> bool:
        try:
            return Path(entry or ".").resolve() != _repository_root  # type: ignore[arg-type]
        except (TypeError, OSError, RuntimeError):  # not a path, or a symlink loop
            return True

    def _is_this_file(origin: str | None) -> bool:
        try:
            return origin is not None and Path(origin).resolve() == Path(__file__).resolve()
        except (OSError, RuntimeError):
            return False

    def _installed_spec(name: str) -> ModuleSpec | None:
        path = [entry for entry in sys.path if _elsewhere(entry)]
        # Every finder, as the import system asks them (an editable install has its own), but
        # the path finder without the repository root; none may give this folder back.
        for finder in sys.meta_path:
            if finder is PathFinder:
                spec = PathFinder.find_spec(name, path)
            else:
                find_spec = getattr(finder, "find_spec", None)
                spec = find_spec(name, None) if find_spec is not None else None
            if spec is not None and not _is_this_file(spec.origin):
                return spec
        return None

    _spec = _installed_spec(__name__)
    if _spec is not None and (_spec.loader is not None or _spec.submodule_search_locations):
        _installed = module_from_spec(_spec)  # (gives a namespace package its loader)
        sys.modules[__name__] = _installed
        # As the import system marks a module it is running, so that another thread's
        # `import kernels` waits for it instead of taking it half-run.
        _spec._initializing = True
        try:
            _spec.loader.exec_module(_installed)
        finally:
            _spec._initializing = False
