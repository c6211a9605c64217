"""Errors the CLI turns into exit codes (DESIGN.md, CLI conventions)."""


class KvbenchInputError(ValueError):
    """Bad usage or input: the CLI prints the message on one line and exits 2."""


class KvbenchRunError(RuntimeError):
    """A failure while running: the CLI prints it with the partial-results path and exits 1."""
