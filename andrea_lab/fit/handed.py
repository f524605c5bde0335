"""What a config file may not choose: how a checkpoint is read, and where a run writes.

A config or a suite is often handed over (a colleague's ``config.yaml``, a downloaded suite), and Lightning
lets its keys decide things that are not experiment settings: ``weights_only: false`` or a
``CheckpointIO`` of its choosing would unpickle the checkpoint that ``ckpt_path: hpc`` or ``last`` finds in a
directory the same file names; ``checkpoint.dirpath`` or ``default_root_dir`` would put the run into another
run; a ``filename`` or ``sub_dir`` with ``..`` would put files outside the run. So, whatever the spelling:

* every checkpoint is read by :func:`andrea_lab.runs.checkpoint_io.load_checkpoint` (weights-only):
  ``weights_only: false`` is refused, and the trainer's CheckpointIO is andrea's;
* a run writes only inside its own run directory: checkpoint directories lie inside it, and every name
  template joined to a directory stays one name (checked before and after formatting);
* ``andrea fit --resume RUN`` continues in ``RUN`` itself, whatever its config.yaml says of the logger;
* the ``model`` and ``data`` sections are plain values: a ``{class_path, init_args}`` inside them (in
  ``optimizer_args``, typed ``dict[str, Any]``, jsonargparse would build it) is refused, naming its key path
  (:func:`check_plain_sections`; a checkpoint's hyperparameters get the same check when it is loaded,
  :mod:`andrea_lab.runs.handed_hparams`), and jsonargparse keeps any spec in an ``Any`` value as data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import Strategy

from andrea_lab.errors import UsageError
from andrea_lab.files import check_one_name, refuse_links_below
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO
from andrea_lab.runs.claim import RunDirectoryError
from andrea_lab.runs.handed_hparams import refuse_class_specs

#: ``{metric:.3f}`` fields of a file name template: replaced by numbers when formatted.
_FIELD = re.compile(r"\{[^{}]*\}")

#: The config keys that name one file or directory inside the run directory, and a valid example of each.
NAME_KEYS = {
    "checkpoint.filename": "step{step}",
    "preemption.filename": "preempted",
    "summary.filename": "summary.json",
}
#: Of :data:`NAME_KEYS`, the templates that are formatted before use (its checkpoint callback checks the
#: formatted name again at every save: ``{val/loss:.3f}`` names a metric and formats to a number).
FORMATTED_KEYS = ("checkpoint.filename",)


#: The config sections whose classes the fit builds itself (AndreaLM, AndreaDataModule) from plain values.
PLAIN_SECTIONS = ("model", "data")
#: What a config may name in them, as the refusal says it.
PLAIN_ALLOWED = (
    "the model and data sections are plain values for AndreaLM and AndreaDataModule, plugins chosen by registered "
    "name (model.optimizer, model.config.activation, ...); a config names classes only as the fit's components "
    "(trainer.logger, trainer.callbacks, trainer.plugins, trainer.strategy, trainer.profiler)"
)


def check_plain_sections(config: Any) -> None:
    """A parsed config's ``model`` and ``data`` sections name no class to build, at any depth (before the
    classes are instantiated, which would build it): one line naming its key path otherwise."""
    for section in PLAIN_SECTIONS:
        refuse_class_specs(config.get(section), section, "the config", PLAIN_ALLOWED)


def keep_class_specs_as_data() -> None:
    """jsonargparse's settings for handed values: a ``{class_path, ...}`` in a value typed ``Any`` stays a
    mapping instead of being built (its announced 5.0 default), and the import paths its default denylist
    names (``os``, ``subprocess``, ``pickle``, ...) are refused instead of warned about."""
    from jsonargparse import set_parsing_settings

    set_parsing_settings(instantiate_subclass_spec_in_any=False, import_path_denylist=[])


def check_weights_only(value: Any) -> None:
    """``weights_only: false`` (from a file or the command line) would let a checkpoint run code: refused."""
    if value is False:
        raise UsageError(
            "weights_only false is refused: it lets a checkpoint run code when it is loaded, and andrea reads "
            "every checkpoint weights-only (every checkpoint `andrea fit` writes loads that way). Remove "
            "weights_only (null or true mean the same here)"
        )


def check_name_templates(config: Any) -> None:
    """Each of :data:`NAME_KEYS` is one name as written and once its ``{fields}`` are formatted (numbers, never
    a separator): a separator inside a field (``{/../../outside}``) would survive where a name is used unformatted,
    and a metric named ``val/loss`` would make a directory of its value."""
    for key, example in NAME_KEYS.items():
        section, field = key.split(".")
        value = (config.get(section) or {}).get(field) if hasattr(config.get(section) or {}, "get") else None
        if not isinstance(value, str):
            continue
        # A name used as written (not formatted) keeps a separator inside a {field}: checked as written too.
        check_file_name(key, value, example, as_written=key not in FORMATTED_KEYS)


def check_file_name(what: str, value: str, example: str, as_written: bool = True) -> None:
    """``value`` is one file name once its ``{fields}`` are formatted (numbers) and, ``as_written``, also as it
    stands: one :class:`UsageError` naming ``what``, the value and ``example`` otherwise."""
    try:
        check_one_name(what, _FIELD.sub("0", value), example)
        if as_written:
            check_one_name(what, value, example)
    except UsageError:
        raise UsageError(
            f"{what} {value!r} would leave the run directory; it is one file name, without '/', '\\' or '..' "
            f"(also inside its {{fields}}; e.g. {example})"
        ) from None


def require_safe_checkpoint_io(trainer: Trainer) -> None:
    """Make the trainer read checkpoints through andrea's loader: Lightning's plain ``TorchCheckpointIO`` (what
    ``trainer.plugins: null`` leaves) is replaced by :class:`AtomicCheckpointIO`; any other CheckpointIO a
    config names (a plugin, or a strategy's ``checkpoint_io``) is refused, naming it."""
    strategy = trainer.strategy
    current = strategy.checkpoint_io
    if type(current) is AtomicCheckpointIO:
        return
    if type(current) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()
        return
    name = f"{type(current).__module__}.{type(current).__qualname__}"
    raise UsageError(
        f"trainer CheckpointIO {name} is refused: andrea reads and writes checkpoints only through "
        "andrea_lab.runs.checkpoint_io.AtomicCheckpointIO (weights-only, verified). Remove it from "
        "trainer.plugins / trainer.strategy"
    )


def require_safe_checkpoint_reading(trainer: Trainer, ckpt_path: Any) -> None:
    """A resumed fit reads its checkpoint through the strategy: Lightning's base ``Strategy.load_checkpoint``
    goes through the CheckpointIO (andrea's weights-only reader), but a strategy with its own (FSDP's full or
    sharded checkpoints, DeepSpeed's) reads the file its own way, around that reader. Such a strategy is
    refused with ``ckpt_path`` unless it reads through andrea's reader first (andrea_lab.fit.strategies)."""
    if not ckpt_path:
        return
    strategy = trainer.strategy
    own_loader = type(strategy).load_checkpoint is not Strategy.load_checkpoint
    if own_loader and not getattr(strategy, "reads_through_andrea", False):
        raise UsageError(
            f"trainer.strategy {_named(strategy)} reads a resumed checkpoint with its own loader, around andrea's "
            "weights-only reader; resume under a strategy that reads through it (auto, ddp, single_device, or "
            "andrea_lab.fit.strategies.AndreaFSDPStrategy for FSDP), or start the run without --ckpt_path"
        )


def inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether ``path`` is ``directory`` or lies under it, ``..`` and links resolved."""
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return real == root or root in real.parents


def _named(thing: Any) -> str:
    return f"{type(thing).__module__}.{type(thing).__qualname__}"


def _outside(what: str, path: Any, run_dir: Path) -> RunDirectoryError:
    return RunDirectoryError(
        f"{what} writes to {path}, outside this run's directory {run_dir}; a run writes only inside its own "
        "directory. Leave it unset (it then writes inside the run) or name a directory inside the run"
    )


def check_writes_inside(trainer: Trainer, run_dir: Path) -> None:
    """Everything the trainer will write lies inside the run directory, whichever key of a config chose it:
    every callback's ``dirpath`` (``checkpoint.dirpath``, a ModelCheckpoint or OnExceptionCheckpoint added
    through ``trainer.callbacks``) and ``filename`` (one name, also inside its ``{fields}``), every logger
    after the first (the first one is the run directory), and the profiler's ``dirpath``/``filename``.
    ``checkpoint.dirpath`` naming another run's ``checkpoints/`` would add files to it and rewrite its
    manifests; a CSVLogger's ``save_dir`` naming a user's directory would replace its metrics.csv."""
    for callback in trainer.callbacks:
        dirpath = getattr(callback, "dirpath", None)
        what = "checkpoint.dirpath" if isinstance(callback, ModelCheckpoint) else f"callback {_named(callback)}"
        if isinstance(dirpath, (str, os.PathLike)) and dirpath and not inside(dirpath, run_dir):
            raise _outside(what, dirpath, run_dir)
        filename = getattr(callback, "filename", None)
        if isinstance(filename, str) and not hasattr(callback, "checked_filename"):
            # Not andrea's own checkpoint callback, which checks every formatted name when it saves.
            check_file_name(f"callback {_named(callback)} filename", filename, "step{step}")
    for logger in trainer.loggers[1:]:
        # save_dir first: reading a TensorBoard logger's log_dir claims (creates) its version directory.
        log_dir = getattr(logger, "save_dir", None) or getattr(logger, "log_dir", None)
        if log_dir and not inside(log_dir, run_dir):
            raise _outside(f"logger {_named(logger)}", log_dir, run_dir)
    profiler = trainer.profiler
    dirpath = getattr(profiler, "dirpath", None)
    if dirpath and not inside(dirpath, run_dir):
        raise _outside(f"profiler {_named(profiler)}", dirpath, run_dir)
    if isinstance(getattr(profiler, "filename", None), str):
        check_file_name("profiler filename", profiler.filename, "fit-profile")


def check_no_links_to_the_run(logger: Any) -> None:
    """The directories between a logger's ``save_dir`` and its run (``name``, then ``version``) are not
    symbolic links: ``runs/quickstart`` linked elsewhere would put the whole run there. Checked before the
    logger claims its version directory (reading ``log_dir`` creates it). ``save_dir`` itself may be a link:
    the user chose it."""
    save_dir, root_dir = getattr(logger, "save_dir", None), getattr(logger, "root_dir", None)
    if not save_dir or not root_dir:
        return
    base = Path(os.path.realpath(save_dir))
    try:
        below = Path(os.path.abspath(root_dir)).relative_to(Path(os.path.abspath(save_dir)))
    except ValueError:
        return
    if below.parts:
        refuse_links_below(base / below.parts[0], base / below, "run directory")


def check_resumed_directory(run_dir: Path, resume_dir: Optional[str]) -> None:
    """``andrea fit --resume RUN`` continues in ``RUN``: a config.yaml whose logger names another save_dir,
    name or sub_dir would otherwise put the resumed checkpoints somewhere else."""
    if resume_dir is not None and os.path.realpath(run_dir) != os.path.realpath(resume_dir):
        raise RunDirectoryError(
            f"--resume {resume_dir}: its config.yaml would put the resumed run in {run_dir}, not in {resume_dir}; "
            "a resumed run continues only in its own directory. Restore the logger settings of its config.yaml "
            f"(or pass --trainer.logger.init_args.save_dir and name so that the run is {resume_dir})"
        )


def checked_name(path: str, dirpath: Optional[str]) -> str:
    """A formatted checkpoint path, refused unless it is one file directly inside ``dirpath``."""
    if dirpath and Path(os.path.normpath(path)).parent != Path(os.path.normpath(dirpath)):
        raise UsageError(
            f"checkpoint.filename formats to {path}, outside the checkpoint directory {dirpath}; a checkpoint "
            "file name has no '/', '\\' or '..' (e.g. step{step})"
        )
    return path
