"""`kvbench report`: one self-contained HTML report from one or more results folders."""

from __future__ import annotations

from pathlib import Path

import click

from kvbench.errors import KvbenchInputError


@click.command(
    "report",
    help=(
        "Write a self-contained HTML report (opens offline) for RUN_DIR... . A RUN_DIR is a "
        "results folder of `kvbench run`: one strategy's folder or a comparison folder (its "
        "strategies are all included). Folders of different runs, e.g. of two git "
        "revisions, are shown side by side with their differences, the first folder being "
        "the base. A sweep's folder (of `kvbench sweep`) gives the sweep's report; give it "
        "alone. `kvbench run` and `kvbench sweep` already write report.html into every "
        "results folder. A folder whose runs did not all finish (interrupted, failed, "
        "killed, unreadable files), or a sweep's folder whose points did not all finish, is "
        "refused, naming them, unless --allow-incomplete: the report then shows what "
        "finished, marked as such."
    ),
)
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...",
                type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="HTML file to write [default: RUN_DIR/report.html for one folder, "
                   "./report.html for several]")
@click.option("--allow-incomplete", is_flag=True,
              help="report folders whose runs did not all finish, each unfinished one marked "
                   "(a killed run shows the requests it had finished)")
def report_command(run_dirs: tuple[Path, ...], output: str | Path | None,
                   allow_incomplete: bool) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.report.runs import run_folders
    from kvbench.report.writer import write_report
    from kvbench.results.run_folder import check_finished
    from kvbench.sweep.sweep_folder import is_sweep_folder, unfinished_points

    if output == "":
        raise KvbenchInputError("-o is empty: give a file name such as report.html")
    if output is not None:  # a place it cannot write is refused before any folder is read
        output = Path(output)
        _check_output(output)
    sweeps = [folder for folder in run_dirs if is_sweep_folder(folder)]
    if sweeps and len(run_dirs) > 1:
        raise KvbenchInputError(f"{sweeps[0]} is a sweep's folder: its report stands alone "
                                f"(kvbench report {sweeps[0]})")
    unfinished = None if sweeps else check_finished(
        list(run_dirs), allow_incomplete=allow_incomplete,
        refusal="--allow-incomplete writes a report of what finished, marked as such")
    for folder in run_dirs if not sweeps else ():
        run_folders(folder)  # KvbenchInputError for a missing or foreign folder
    if output is None:
        output = run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html")
        _check_output(output)
    if sweeps:
        from kvbench.sweep.report import read_and_write  # CLI: plotly, only for this command

        missing = unfinished_points(sweeps[0])
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            what = (f"{sweeps[0]}: {len(missing)} point(s) not whole (interrupted, killed or "
                    f"never run): {shown}")
            if not allow_incomplete:
                raise KvbenchInputError(f"{what}; `kvbench sweep {sweeps[0]}` finishes the "
                                        "sweep, --allow-incomplete reports what finished")
            click.echo(f"kvbench: warning: {what}; the report shows what finished", err=True)
        click.echo(str(read_and_write(sweeps[0], output)))
        return
    written = write_report(list(run_dirs), output)
    if unfinished:
        click.echo(f"kvbench: warning: {unfinished}; the report marks them", err=True)
    click.echo(str(written))


def _check_output(output: Path) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.results.files import check_output_folder

    if output.exists() and output.is_dir():
        raise KvbenchInputError(f"-o {output} is a directory; give a file name such as "
                                f"{output / 'report.html'}")
    if not output.parent.exists():
        raise KvbenchInputError(f"cannot write {output}: folder {output.parent} does not exist")
    check_output_folder(output.parent, flag=f"-o {output}: folder")  # /proc, read-only, ...
