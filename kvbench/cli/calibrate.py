"""`kvbench calibrate --out FILE.toml`: time this machine's GPU and write a `--gpu-spec` file."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="calibrate")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="the --gpu-spec TOML file to write")
@click.option("--model", default="llama-2-7b", show_default=True,
              help="model preset whose layer shapes are timed")
@click.option("--base", default=None,
              help="GPU preset whose datasheet FLOP/s and bandwidth the file keeps "
                   "[default: the preset named like the device, else a100-80gb]")
@click.option("--name", default=None, help="the GPU's name in the file [default: file stem]")
@click.option("--device", default="cuda", show_default=True, help="CUDA device to time")
def calibrate_command(out: str, model: str, base: str | None, name: str | None,
                      device: str) -> None:
    """Time GEMM and attention kernels on the CUDA GPU and write a --gpu-spec TOML file."""
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.errors import KvbenchInputError
    from kvbench.models.presets import get_preset
    from kvbench.simulator.calibrate import base_preset, fit, measure, require_cuda

    if not out.strip():  # an unset shell variable: refused before the GPU is looked at
        raise KvbenchInputError("--out is empty: name the --gpu-spec TOML file to write")
    require_cuda()  # before anything else: no CUDA, exit 2 at once
    cfg = get_preset(model)
    measurements = measure(cfg, device, progress=lambda what: click.echo(f"timing {what} ..."))
    spec = base_preset(measurements.device_name, base)
    calibration = fit(measurements, spec, name or Path(out).stem)
    path = calibration.write(out)
    for op, err in calibration.errors.items():
        click.echo(f"  {op:<13} fit error {err:.1%}")
    click.echo(f"wrote {path} (use: kvbench simulate --gpu-spec {path} ...)")
