"""Checks of parsed ``trainer.*`` and ``ckpt_path`` values that Lightning would refuse only once the loop runs,
or in a many-line traceback: each is one line naming the value and what is valid, before the data is prepared."""

from __future__ import annotations

from typing import Any

from andrea_lab.errors import UsageError
from andrea_lab.files import check_output_dir
from andrea_lab.fit.loggers import check_run_name, check_run_version


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_trainer_arguments(trainer: Any) -> None:
    """``trainer.*`` values Lightning only refuses (or misuses) once the loop runs."""
    accumulate = trainer.get("accumulate_grad_batches")
    if accumulate is not None and (not isinstance(accumulate, int) or accumulate < 1):
        raise UsageError(
            f"trainer.accumulate_grad_batches must be an integer >= 1 (micro-batches per optimizer "
            f"step), got {accumulate!r}"
        )
    interval = trainer.get("val_check_interval")
    if interval is not None and (
        not is_number(interval)
        or not interval > 0
        or interval != interval
        or (isinstance(interval, float) and interval > 1)
    ):
        raise UsageError(
            f"trainer.val_check_interval must be an integer >= 1 (batches) or a fraction in (0, 1] "
            f"of an epoch, got {interval!r}"
        )
    clip = trainer.get("gradient_clip_val")
    if clip is not None and (not is_number(clip) or not 0 <= clip < float("inf")):
        raise UsageError(
            f"trainer.gradient_clip_val must be a finite number >= 0 (0 or null: no clipping), got {clip!r}"
        )


#: ``ckpt_path`` values with which Lightning goes looking for a checkpoint itself (``hpc``: in the root directory,
#: ``best``: the best one of a ModelCheckpoint) or reads none (``""``): andrea resumes from a file it names.
SEARCHED_CHECKPOINTS = ("hpc", "best", "")


def check_special_checkpoint(ckpt_path: Any) -> None:
    if isinstance(ckpt_path, str) and ckpt_path.strip() in SEARCHED_CHECKPOINTS:
        raise UsageError(
            f"ckpt_path {ckpt_path!r} is refused: andrea resumes from a checkpoint file it can name and check "
            "(--ckpt_path RUN/checkpoints/last.ckpt) or from a run (andrea fit --resume RUN); 'hpc', 'best' and "
            "an empty value make Lightning search for one instead"
        )


def check_logger_arguments(logger: Any) -> None:
    """Each logger's ``save_dir`` can be written and its ``name``/``version`` stay one directory under it
    (checked here, at parse time: jsonargparse would wrap the logger's own refusal into a many-line
    ValueError, and an unwritable directory would only fail after the data is prepared)."""
    for index, one in enumerate(logger if isinstance(logger, list) else [logger]):
        init_args = one.get("init_args") if hasattr(one, "get") else None
        if init_args is not None:
            if index == 0:  # the first logger's version is the run directory (andrea_lab.fit.loggers)
                check_run_version(init_args.get("version"))
            check_run_name("name", init_args.get("name"))
            check_run_name("version", init_args.get("version"))
            check_run_name("sub_dir", init_args.get("sub_dir"))
            if init_args.get("save_dir"):
                check_output_dir(init_args.get("save_dir"), "trainer.logger.init_args.save_dir")
