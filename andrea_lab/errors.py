"""Errors that end a command with a clear message and a distinct exit status (see andrea_lab.cli)."""


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or gradient and the policy says stop (exit status 3)."""


class UsageError(ValueError):
    """Something the user passed is invalid; the message names it and what would be valid (exit status 2)."""
