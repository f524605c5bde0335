"""A TensorBoard logger whose run directory is claimed atomically.

Lightning's ``TensorBoardLogger`` picks ``version_N`` by listing the existing directories, so two
fits started at the same moment with the same experiment name can pick the same N and write into
one directory. Here the version is claimed with ``os.mkdir``, which succeeds for exactly one
process: a second fit moves on to the next free N. Nothing a user already has is reused.

It also leaves out the ``epoch`` scalar Lightning adds to every logged dict: a fit is counted in steps
(``max_steps``, ``val_check_interval``), and that one tag would take a default column of TensorBoard's
HParams table (:mod:`andrea_lab.callbacks.hparams`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only


#: Lightning's per-log-call epoch counter, not logged (see the module docstring).
EPOCH_KEY = "epoch"


class AndreaTensorBoardLogger(TensorBoardLogger):
    """``TensorBoardLogger`` that claims ``version_N`` atomically and logs no ``epoch``; otherwise identical."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics({key: value for key, value in metrics.items() if key != EPOCH_KEY}, step)

    def _get_next_version(self) -> int:
        if rank_zero_only.rank != 0:  # other ranks never create directories; Lightning broadcasts rank 0's
            return super()._get_next_version()
        root = Path(self.root_dir)
        root.mkdir(parents=True, exist_ok=True)
        version = super()._get_next_version()
        while True:
            try:
                os.mkdir(root / f"version_{version}")
                return version
            except FileExistsError:
                version += 1
