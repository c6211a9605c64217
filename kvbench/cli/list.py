"""`kvbench list`: what can be chosen (strategies, policies, queue orders, workloads, model
presets)."""

from __future__ import annotations

import click


@click.command(name="list")
def list_command() -> None:
    """Strategies, batching policies, queue orders, workloads and model presets."""
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.models.presets import PRESETS
    from kvbench.report.text_table import format_table
    from kvbench.scheduling import POLICIES, QUEUE_ORDERS
    from kvbench.session.run_options import RunOptions
    from kvbench.strategies import STRATEGIES
    from kvbench.units import format_bytes
    from kvbench.workloads import WORKLOADS

    vllm, classic = RunOptions.for_kind("run"), RunOptions.for_kind("run", defaults="classic")
    for title, registry, width in (
            (f"strategies (default {vllm.strategy}; {classic.strategy} under --defaults "
             "classic):", STRATEGIES, 13),
            (f"\nbatching policies (default {vllm.batching}; {classic.batching} under "
             "--defaults classic):", POLICIES, 12),
            ("\nqueue orders (--queue-order, with any batching policy):", QUEUE_ORDERS, 12)):
        click.echo(title)
        for name, summary in registry.describe():
            click.echo(f"  {name:<{width}} {summary}")
    click.echo("\nworkloads (parameters: --workload-param KEY=VALUE):")
    for entry in WORKLOADS:
        params = ", ".join(f"{k}={v}" for k, v in entry.params.items())
        click.echo(f"  {entry.name:<14} {entry.summary}")
        if params:
            click.echo(f"  {'':<14} {params}")
    click.echo("\nmodel presets:")
    rows = []
    for c in PRESETS.values():
        # latent attention: one cached row of latent + rope for all query heads
        kv_heads, head_dim = ((f"{c.num_heads}/1 MLA", c.mla.latent_dim) if c.mla is not None
                              else (f"{c.num_heads}/{c.num_kv_heads}", c.head_dim))
        rows.append([c.name, c.num_layers, c.hidden_size, kv_heads,
                     head_dim, _params(c.num_parameters()), c.max_position_embeddings,
                     format_bytes(c.kv_bytes_per_token(2))])
    click.echo(format_table(
        ["preset", "layers", "hidden", "heads q/kv", "head dim", "params", "max len",
         "KV/token bf16"], rows))


def _params(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


__all__ = ["list_command"]
