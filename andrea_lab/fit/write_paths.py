"""Where a fit's callbacks, tuners, loggers and profiler write: inside the run's own directory, whatever they are.

Lightning's components carry path options of their own (SpikeDetection's ``exclude_batches_path``, a
checkpoint's ``dirpath``, a profiler's ``dirpath``), and several write beside ``trainer.default_root_dir`` when
left unset (SpikeDetection's ``skip_batches.json``; the learning-rate and batch-size finders' temporary
checkpoints). A handed config or suite can add any of them through ``trainer.callbacks``, so a list of the
classes known today would miss the next one. The rule is by name instead:

* every constructor parameter of a callback, a logger or the profiler whose name says it is a place
  (:data:`PATH_PARAMETER`: ``..._path``, ``..._dir``, ``dirpath``, ``..._file``, ...) is read back from the built
  object, and from a twin that has restored the checkpoint's state of it (a state can carry a path:
  SpikeDetection's ``bad_batches_path``); a text value must resolve inside the run directory, ``..`` and links
  resolved, relative ones from the working directory where Lightning opens them. The first logger's
  ``save_dir`` is the exception: the run directory is made below it.
* ``trainer.default_root_dir`` becomes the run directory once it is claimed (:func:`use_run_as_root`), so
  what a component writes "beside the run" by default lands in it.
"""

from __future__ import annotations

import inspect
import os
import re
from copy import deepcopy
from pathlib import Path
from typing import Any, Iterator

from lightning.pytorch import Trainer

from andrea_lab.fit.handed import inside
from andrea_lab.runs.claim import RunDirectoryError

#: A parameter whose name says it is a file or directory to write: ``exclude_batches_path``, ``save_dir``,
#: ``dirpath``, ``log_file``, ``output_directory``, ``root`` ... (``filename``, one name joined to a ``dirpath``,
#: is checked as a name by andrea_lab.fit.handed).
PATH_PARAMETER = re.compile(r"(?:^|_)(?:path|dir|dirpath|filepath|file|directory|folder|root|root_dir)$")
#: Parameters that match :data:`PATH_PARAMETER` but are one directory *name* below the run, checked as names
#: (andrea_lab.fit.loggers.check_run_name): TensorBoard's ``sub_dir``.
NAME_PARAMETERS = ("sub_dir",)
#: The first logger's parameters that choose where the run directory is made (the user's choice).
RUN_ROOT_PARAMETERS = ("save_dir", "root_dir", "dir")


def path_parameters(component: Any) -> list[str]:
    """The names of ``component``'s constructor parameters (every class of its MRO) that name a place."""
    names: list[str] = []
    for cls in type(component).__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        try:
            parameters = inspect.signature(init).parameters
        except (TypeError, ValueError):  # a builtin's __init__
            continue
        names += [
            name
            for name in parameters
            if PATH_PARAMETER.search(name) and name not in NAME_PARAMETERS and name not in names
        ]
    return names


def path_options(component: Any, skip: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(parameter, value)`` of each path parameter of ``component`` whose value (the attribute of that name,
    or ``_name``) is a non-empty path."""
    for name in path_parameters(component):
        if name in skip:
            continue
        for attribute in (name, f"_{name}"):
            try:
                value = getattr(component, attribute)
            except Exception:  # a property that needs a trainer, a logger's experiment
                continue
            if isinstance(value, (str, os.PathLike)) and os.fspath(value):
                yield name, os.fspath(value)
                break


def _named(thing: Any) -> str:
    return f"{type(thing).__module__}.{type(thing).__qualname__}"


def _refuse_outside(component: Any, what: str, run_dir: Path, skip: tuple[str, ...] = ()) -> None:
    for name, value in path_options(component, skip):
        if not inside(value, run_dir):
            raise RunDirectoryError(
                f"{what} {_named(component)}: {name} {value!r} is outside this run's directory {run_dir}; a fit "
                f"writes only inside its own run directory. Leave {name} unset (it then writes inside the run)"
            )


def _restored(callback: Any, stored: Any) -> Any:
    """A copy of ``callback`` with a copy of the checkpoint's state of it loaded; None without a state, or
    when it does not load (then Lightning's own restore of it fails too, before the callback writes anything:
    SpikeDetection's ``load_state_dict`` fails on any state in Lightning 2.6)."""
    state = stored.get(callback.state_key) if isinstance(stored, dict) else None
    if state is None:
        return None
    twin = deepcopy(callback)
    try:
        (twin.apply_state if hasattr(twin, "apply_state") else twin.load_state_dict)(deepcopy(state))
    except Exception:
        return None
    return twin


def check_path_options(trainer: Trainer, run_dir: Path, stored_callback_states: Any = None) -> None:
    """Refuse (:class:`RunDirectoryError`, one line) any path option of the trainer's callbacks, loggers and
    profiler that resolves outside ``run_dir``, before the run directory is claimed."""
    for callback in trainer.callbacks:
        if not path_parameters(callback):
            continue
        _refuse_outside(callback, "callback", run_dir)
        twin = _restored(callback, stored_callback_states)
        if twin is not None:
            _refuse_outside(twin, "the checkpoint's state of callback", run_dir)
    for index, logger in enumerate(trainer.loggers):
        _refuse_outside(logger, "logger", run_dir, skip=RUN_ROOT_PARAMETERS if index == 0 else ())
    if trainer.profiler is not None:
        _refuse_outside(trainer.profiler, "profiler", run_dir)


def use_run_as_root(trainer: Trainer, run_dir: Path) -> None:
    """Make ``run_dir`` the trainer's ``default_root_dir``: Lightning writes there what has no place of its own
    (SpikeDetection's default file, the finders' temporary checkpoints), which would otherwise land in the
    working directory, outside the run. (Lightning keeps it in ``_default_root_dir``; with a logger nothing of
    the fit's own is placed by it: checkpoints follow the logger, as before.)"""
    trainer._default_root_dir = os.fspath(run_dir)
