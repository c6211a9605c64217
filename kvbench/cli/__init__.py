"""`kvbench` command line: only click. Options come from `kvbench.session.run_options`, the work
from `kvbench.bench` (session, sweeps, estimates); subcommands load when they are used.

- `app`: the group, lazy subcommands, exit codes and `main` (the console script);
- `options`: click options generated from `RunOptions`;
- `run`, `simulate`, `list`, `estimate`, `report`, `compare`, `sweep`: one command each.
"""

from kvbench.cli.app import cli, main

__all__ = ["cli", "main"]
