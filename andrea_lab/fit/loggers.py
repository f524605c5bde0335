"""A TensorBoard logger whose run directory is claimed atomically.

Lightning's ``TensorBoardLogger`` picks ``version_N`` by listing the existing directories, so two
fits started at the same moment with the same experiment name can pick the same N and write into
one directory. Here the version is claimed with ``os.mkdir``, which succeeds for exactly one
process: a second fit moves on to the next free N. Nothing a user already has is reused.

It also leaves out the ``epoch`` scalar Lightning adds to every logged dict: a fit is counted in steps
(``max_steps``, ``val_check_interval``), and that one tag would take a default column of TensorBoard's
HParams table (:mod:`andrea_lab.fit.hparams`).

``name``, ``version`` and ``sub_dir`` are one directory name each: a ``..`` or a path separator in either (from a
handed config.yaml, say) would put the run outside ``save_dir``, so they are refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from andrea_lab.errors import UsageError


def check_run_name(field: str, value: Any) -> None:
    """``name``, ``version`` or ``sub_dir``: one directory under ``save_dir``, no separator, not ``.``/``..``."""
    if value is None or isinstance(value, int) or value == "":
        return
    text = str(value)
    if text in (".", "..") or "/" in text or "\\" in text or os.sep in text or "\0" in text:
        raise UsageError(
            f"trainer.logger.init_args.{field} {text!r} would leave save_dir; a {field} is one "
            "directory name: letters, digits, '_', '-', '.', without '/', '\\' or '..' "
            f"(e.g. {dict(name='quickstart', sub_dir='extra').get(field, 'version_0')})"
        )


def check_run_version(value: Any) -> None:
    """The first logger's ``version`` names the run directory: an empty one makes ``save_dir/name`` itself the
    run, a directory that is not new (a user's folder, its ``metrics.csv`` replaced by a CSVLogger's)."""
    if isinstance(value, str) and not value.strip():
        raise UsageError(
            f"trainer.logger.init_args.version {value!r} would make save_dir/name itself the run directory, "
            "which is never a fresh one; leave version unset (a new version_N) or name one (e.g. version_0)"
        )


#: Lightning's per-log-call epoch counter, not logged (see the module docstring).
EPOCH_KEY = "epoch"


class AndreaTensorBoardLogger(TensorBoardLogger):
    """``TensorBoardLogger`` that claims ``version_N`` atomically and logs no ``epoch``; otherwise identical."""

    #: Whether this logger made its version directory (a version it picked, not one named): a fit that fails
    #: before writing into it removes it (andrea_lab.runs.claim.remove_if_unused).
    made_version_dir = False

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics({key: value for key, value in metrics.items() if key != EPOCH_KEY}, step)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_run_name("name", self._name)
        check_run_name("version", self._version)
        check_run_name("sub_dir", self._sub_dir)

    def _get_next_version(self) -> int:
        if rank_zero_only.rank != 0:  # other ranks never create directories; Lightning broadcasts rank 0's
            return super()._get_next_version()
        root = Path(self.root_dir)
        root.mkdir(parents=True, exist_ok=True)
        version = super()._get_next_version()
        while True:
            try:
                os.mkdir(root / f"version_{version}")
                self.made_version_dir = True
                return version
            except FileExistsError:
                version += 1
