"""`kvbench export RUN --format vllm-bench|csv [-o FILE]`: a results folder for other tools."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kvbench.errors import KvbenchInputError


@click.command("export", help=(
    "Write a run's results in another tool's format. --format vllm-bench: the JSON that "
    "`vllm bench serve --save-result` saves (completed, request_throughput, "
    "output_throughput, total_token_throughput, mean/median/std/p99 of ttft, tpot, itl and "
    "e2el in ms, input_lens, output_lens, ttfts in seconds, itls per request), for one "
    "strategy's folder. --format csv: one row per request, with a label column, for every "
    "run of the folder (a comparison folder gives all its strategies). Without -o the "
    "result goes to standard output. A folder from an older kvbench without tokens.jsonl "
    "exports what it can and names the keys it could not fill. A folder whose runs did not "
    "all finish is refused, naming them, unless --allow-incomplete."))
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["vllm-bench", "csv"]), required=True,
              help="vllm-bench (JSON) or csv (per-request rows)")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="file to write [default: standard output]")
@click.option("--allow-incomplete", is_flag=True,
              help="export runs that did not finish (their files hold what finished; warns)")
def export_command(run_dir: Path, fmt: str, output: Path | None,
                   allow_incomplete: bool) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.report.runs import run_folders
    from kvbench.results.export import request_table, vllm_bench_result
    from kvbench.results.files import atomic_write_text
    from kvbench.results.folder_state import check_finished

    unfinished = check_finished([run_dir], allow_incomplete=allow_incomplete,
                                refusal="export finished runs only (--allow-incomplete "
                                        "exports what finished)")
    folders = run_folders(run_dir)
    folders = [f for f in folders if (f / "summary.json").is_file()]
    if not folders:
        raise KvbenchInputError(f"{run_dir} holds no run with a summary.json to export")
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
    if unfinished:  # once the export is made: a refusal after it would be a second line
        click.echo(f"kvbench: warning: {unfinished}; exporting what finished", err=True)
    if result.missing:
        click.echo("kvbench: warning: could not fill " + ", ".join(result.missing)
                   + " (no per-token times in this folder; written by an older kvbench?)",
                   err=True)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        click.echo(f"wrote {output}", err=True)


__all__ = ["export_command"]
