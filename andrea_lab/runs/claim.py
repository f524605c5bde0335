"""A fit claims its run directory before it writes anything there.

Three rules, checked by :func:`claim_run_directory` once the run directory is known and before the
first file is written (``config.yaml``, ``hparams.yaml``, events, checkpoints, ``summary.json``):

* a fit never writes into a directory that already holds a run, unless it resumes *that* run (its
  ``ckpt_path`` lies inside it: ``andrea fit --resume``, a sweep continuing a preempted run) -- so a
  rerun of a saved ``config.yaml`` cannot overwrite, or null, a finished run's record; nor, unless it
  resumes, into one that holds anything else (a user's folder named as the logger's version or as
  ``default_root_dir``: its ``metrics.csv`` would be replaced) -- a new run's directory is fresh;
* nothing in the run directory is a symbolic link: a handed run directory whose ``hparams.yaml``
  points at ``../../login_script.sh`` would otherwise have us write through it;
* one fit at a time: an exclusive lock (``.run.lock``, held until the process ends; the kernel
  releases it on any exit, ``kill -9`` included), so two concurrent ``--resume`` of a run refuse.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout

from andrea_lab.errors import UsageError

RUN_LOCK_FILE = ".run.lock"
#: Files (and directories) whose presence means a fit already wrote here. The sweep's own
#: ``sweep-run.json``/``sweep.log``, written before its fit starts, do not count.
RUN_FILES = ("summary.json", "config.yaml", "hparams.yaml", "checkpoints", "validate.json")
#: What a fresh run directory may already hold when its fit starts: the sweep's start marker and log
#: (andrea_lab.runs.directory) and the lock of an earlier refused attempt. Anything else is the user's.
FRESH_FILES = ("sweep-run.json", "sweep.log", RUN_LOCK_FILE)


class RunDirectoryError(UsageError):
    """A fit asked to write where it must not; the message says why and what to run instead."""


def holds_run(run_dir: Path) -> bool:
    """Whether a fit already wrote into ``run_dir`` (a record, a config, checkpoints or event files)."""
    if not run_dir.is_dir():
        return False
    return any((run_dir / name).exists() for name in RUN_FILES) or any(run_dir.glob("events.out.tfevents.*"))


def resumes(run_dir: Path, ckpt_path: Optional[str]) -> bool:
    """Whether ``ckpt_path`` is a checkpoint inside ``run_dir``: the fit continues that run."""
    if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry"):
        return False
    return Path(os.path.realpath(run_dir)) in Path(os.path.realpath(ckpt_path)).parents


def foreign_entries(run_dir: Path) -> list[str]:
    """The entries of ``run_dir`` a fresh run directory would not hold (:data:`FRESH_FILES`), sorted."""
    if not run_dir.is_dir():
        return []
    return sorted(entry.name for entry in run_dir.iterdir() if entry.name not in FRESH_FILES)


def refuse_links(run_dir: Path) -> None:
    """Refuse a run directory that is, or contains, a symbolic link (checked without following any)."""
    if run_dir.is_symlink():
        raise RunDirectoryError(
            f"the run directory {run_dir} is a symbolic link (to {os.readlink(run_dir)}); "
            "andrea writes runs only into real directories: copy the run instead of linking it"
        )
    if not run_dir.is_dir():
        return
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        for name in (*dirs, *files):
            path = Path(root) / name
            if path.is_symlink():
                raise RunDirectoryError(
                    f"{path} is a symbolic link (to {os.readlink(path)}); andrea never writes through links in a "
                    f"run directory, since a handed run could point one anywhere. Remove the link (or resume a copy "
                    f"of the run made with `cp -rL`)"
                )


def claim_run_directory(run_dir: str | os.PathLike, ckpt_path: Optional[str]) -> FileLock:
    """Check the three rules of the module doc for a fit about to write into ``run_dir``; return the
    acquired lock, which the caller keeps for as long as the fit runs."""
    run_dir = Path(run_dir)
    refuse_links(run_dir)
    if holds_run(run_dir) and not resumes(run_dir, ckpt_path):
        raise RunDirectoryError(
            f"{run_dir} already holds a run, and a fit never writes into an existing run: to continue it, "
            f"`andrea fit --resume {run_dir}`; to rerun its config as a new run, leave the logger's version "
            f"unset (--trainer.logger.init_args.version null) or choose an unused one"
        )
    foreign = [] if resumes(run_dir, ckpt_path) else foreign_entries(run_dir)
    if foreign:
        more = f" (and {len(foreign) - 3} more)" if len(foreign) > 3 else ""
        raise RunDirectoryError(
            f"{run_dir} is not a fresh run directory: it holds {', '.join(foreign[:3])}{more}, which no fit wrote, "
            "and a new run is written only into a new or empty directory; leave the logger's version unset "
            "(a new version_N) or choose an unused one (without a logger: a new --trainer.default_root_dir)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / RUN_LOCK_FILE)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunDirectoryError(
            f"{run_dir} is being written by another fit right now (it holds "
            f"{run_dir / RUN_LOCK_FILE}); wait for it to end, or stop it first"
        ) from None
    return lock


def remove_if_unused(run_dir: Optional[Path]) -> None:
    """Remove ``run_dir``, which a fit created and then failed in before writing anything into it (a corpus too
    small for its tokenizer, a bad data path): holding nothing but the lock, it is no run, and left behind it
    would be an empty ``version_N`` that TensorBoard and ``andrea compare`` list. Called while the lock is
    held, so no other fit can have claimed it; a directory with anything else in it is left as it is."""
    if run_dir is None:
        return
    try:
        if sorted(entry.name for entry in run_dir.iterdir()) != [RUN_LOCK_FILE]:
            return
        (run_dir / RUN_LOCK_FILE).unlink()
        run_dir.rmdir()
    except OSError:  # gone, unreadable, or written to meanwhile: nothing of the user's is touched
        return
