"""Subcommands of the `kvbench` CLI, one module each."""
