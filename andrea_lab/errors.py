"""Errors that end a command with a clear message and a distinct exit status (see andrea_lab.cli)."""


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or gradient and the policy says stop (exit status 3)."""
