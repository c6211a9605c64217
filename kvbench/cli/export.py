"""`kvbench export RUN --format vllm-bench|vllm-sweep|csv [-o FILE|DIR]`: a results folder
for other tools."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import click

from kvbench.errors import KvbenchInputError


@click.command("export", help=(
    "Write a run's results in another tool's format. --format vllm-bench (or vllm): the JSON that "
    "`vllm bench serve --save-result --save-detailed` saves (every key, in vLLM's units: "
    "latency lists in seconds, statistics in ms), for one strategy's folder. --format "
    "vllm-sweep: into the folder -o names, the layout `vllm bench sweep serve` leaves "
    "(one folder per configuration with run=K.json and summary.json), which `vllm bench "
    "sweep plot` and `plot_pareto` read; a comparison gives one configuration per "
    "strategy, a --repeat run one record per repeat. --format csv: one row per sample, "
    "with a label column, for every run of the folder. Without -o the result goes to "
    "standard output. A folder from an older kvbench without token times exports what it "
    "can and names the keys it could not fill. A folder whose runs did not all finish is "
    "refused, naming them, unless --allow-incomplete."))
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["vllm-bench", "vllm", "vllm-sweep", "csv"]),
              required=True,
              help="vllm-bench (JSON; vllm is the same), vllm-sweep (a folder) or csv")
@click.option("-o", "--output", default=None,
              help="file to write [default: standard output]; vllm-sweep: the folder")
@click.option("--allow-incomplete", is_flag=True,
              help="export runs that did not finish (their files hold what finished; warns)")
def export_command(run_dir: Path, fmt: str, output: str | None,
                   allow_incomplete: bool) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.report.runs import run_folders
    from kvbench.results.export import request_table, vllm_bench_result, vllm_sweep_files
    from kvbench.results.files import atomic_write_text, check_output_folder
    from kvbench.results.run_folder import check_finished
    from kvbench.results.summary import summary_file

    if fmt == "vllm":  # what vLLM users type: the JSON of `vllm bench serve`
        fmt = "vllm-bench"
    if output is not None and not output.strip():  # an unset shell variable, not "."
        raise KvbenchInputError("-o is empty: name the file (vllm-sweep: the folder) to write")
    output = Path(output) if output is not None else None
    if output is not None and output.is_dir() and fmt != "vllm-sweep":
        raise KvbenchInputError(f"-o {output} is a folder: name the file to write")
    if output is not None:  # before any reading: /proc, a read-only folder, ...
        check_output_folder(output if fmt == "vllm-sweep" else output.parent,
                            flag=f"-o {output}: folder")
    unfinished = check_finished([run_dir], allow_incomplete=allow_incomplete,
                                refusal="export finished runs only (--allow-incomplete "
                                        "exports what finished)")
    folders = [f for f in run_folders(run_dir) if summary_file(f) is not None]
    if not folders:
        raise KvbenchInputError(f"{run_dir} holds no run with a summary to export")
    if fmt == "vllm-sweep":
        if output is None:
            raise KvbenchInputError("--format vllm-sweep writes a folder: give it with -o DIR")
        if output.exists() and not output.is_dir():
            raise KvbenchInputError(f"-o {output} is a file: vllm-sweep writes a folder")
        files, missing = vllm_sweep_files(folders)
        _warn_unfinished(unfinished)
        _warn_missing(missing)
        _write_all(output, files)
        click.echo(f"wrote {len(files)} files under {output}", err=True)
        return
    if fmt == "vllm-bench":
        if len(folders) > 1:
            names = ", ".join(str(f.relative_to(run_dir)) for f in folders)
            raise KvbenchInputError(
                f"{run_dir} holds {len(folders)} runs ({names}): export one of them, "
                f"e.g. {folders[0]}")
        result = vllm_bench_result(folders[0])
        text = json.dumps(result.data, indent=2) + "\n"
    else:
        result = request_table(folders)
        text = result.data["frame"].to_csv(index=False)
    _warn_unfinished(unfinished)
    _warn_missing(result.missing)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        click.echo(f"wrote {output}", err=True)


def _write_all(output: Path, files: dict[str, str]) -> None:
    """Every file under `output`, or none: written into a hidden folder there first, then
    each renamed into place (a disk that fills leaves no configuration half exported)."""
    created = not output.exists()
    output.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kvbench-export-", dir=output))
    try:
        for relative, text in files.items():
            try:
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                (staging / relative).write_text(text, encoding="utf-8")
            except OSError as err:
                err.filename = str(output / relative)
                raise
        for relative in files:
            (output / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / relative, output / relative)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(output, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)


def _warn_unfinished(unfinished: str | None) -> None:
    # once the export is made: a refusal after it would be a second line
    if unfinished:
        click.echo(f"kvbench: warning: {unfinished}; exporting what finished", err=True)


def _warn_missing(missing: list[str]) -> None:
    if missing:
        click.echo("kvbench: warning: could not fill " + ", ".join(missing)
                   + " (no per-token times in this folder; written by an older kvbench?)",
                   err=True)


__all__ = ["export_command"]
