"""`kvbench` command line (click only): `app` holds the group, `main` and the failure contract,
`options` the options generated from `RunOptions`, every other module one command."""

from kvbench.cli.app import cli, main

__all__ = ["cli", "main"]
