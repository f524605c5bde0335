"""The errors a command reports as one message, all under :class:`AndreaError` (see andrea_lab.cli).

The CLI catches ``AndreaError`` and prints its message (no traceback unless ANDREA_LAB_DEBUG=1);
the class decides the exit status: 2 for anything the user passed or installed (a value, a file, a
plugin), 3 for a fit stopped by the divergence policy, 4 for a fit stopped by SIGTERM/SIGUSR1 after
writing its preemption checkpoint, 5 for a full disk. 1 stays what it is everywhere: a crash.
"""

import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

#: Set, a command (and a script) raises instead of printing its one line: the full traceback, for a bug report.
DEBUG_ENV_VAR = "ANDREA_LAB_DEBUG"


class AndreaError(Exception):
    """Base of every error andrea reports as one message; ``exit_status`` is how the command ends."""

    exit_status = 2


class UsageError(AndreaError, ValueError):
    """Something the user passed is invalid; the message names it and what would be valid (exit status 2)."""


class CheckpointStateError(UsageError):
    """A callback's state in a checkpoint is not what andrea-lab writes (a handed or damaged file; exit status 2)."""


@contextmanager
def reading_checkpoint_state(owner: str) -> Iterator[None]:
    """Restore ``owner``'s state from a checkpoint inside this: whatever a malformed state breaks (a wrong
    type, a missing key) becomes one :class:`CheckpointStateError` naming it, not a traceback mid-fit."""
    try:
        yield
    except AndreaError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
        raise CheckpointStateError(
            f"the {owner} state in the checkpoint is malformed ({type(exc).__name__}: {exc}); "
            "resume from another checkpoint, or start the run afresh"
        ) from None


class MissingFileError(UsageError, FileNotFoundError):
    """A file the user named does not exist (exit status 2)."""


class DivergenceError(AndreaError, RuntimeError):
    """Training produced a non-finite loss or gradient and the policy says stop (exit status 3)."""

    exit_status = 3


class PreemptedError(AndreaError, RuntimeError):
    """A fit stopped by SIGTERM or SIGUSR1 after writing a checkpoint of its last completed optimizer step;
    the message says how to resume (exit status 4: not a mistake, and distinct from a crash)."""

    exit_status = 4


class DiskFullError(AndreaError, OSError):
    """A write failed with ENOSPC; the message names the file and what is still intact (exit status 5)."""

    exit_status = 5


def run_script(main: Callable[[list[str]], int], argv: list[str], prog: str) -> int:
    """``main(argv)`` of a ``scripts/*.py``, ending on bad input as an ``andrea`` command does: an
    :class:`AndreaError` (a missing suite, a damaged run handed to it) is one line, ``PROG: error: ...``, and
    its exit status, not a traceback (unless :data:`DEBUG_ENV_VAR` is set)."""
    try:
        return main(argv)
    except AndreaError as exc:
        if os.environ.get(DEBUG_ENV_VAR):
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_status
