"""PhaseTimer: the callback benchmarks/sweep_throughput.py adds to every fit to see where its time goes.

It stamps (wall clock, ``time.time()``, comparable with the sweep's own stamps of launch and exit) the
fit's start, the sanity check, every optimizer step, every in-training validation, the held-out
evaluation and the end of training, and writes them as ``phases.json`` in the run directory when the
process exits. It only reads clocks: the fit's numbers are the same with and without it.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path
from typing import Any

import lightning as L

from andrea_lab.fit import HeldOutEvaluation

PHASES_FILE = "phases.json"


class PhaseTimer(L.Callback):
    """Stamps of one fit's phases, written to ``<log_dir>/phases.json`` at exit."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: dict[str, Any] = {
            "pid": os.getpid(),
            "steps": 0.0,
            "step_count": 0,
            "validation": 0.0,
            "sanity": 0.0,
            "heldout": 0.0,
        }
        self._open: dict[str, float] = {}

    def _begin(self, key: str) -> None:
        self._open[key] = time.time()

    def _end(self, key: str) -> None:
        self.stamps[key] += time.time() - self._open.pop(key, time.time())

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.stamps["setup"] = time.time()
        for callback in trainer.callbacks:
            if isinstance(callback, HeldOutEvaluation):
                self._time_heldout(callback)
        directory = Path(trainer.log_dir or trainer.default_root_dir)
        atexit.register(self._write, directory / PHASES_FILE)

    def _time_heldout(self, callback: HeldOutEvaluation) -> None:
        evaluate = callback.evaluate

        def timed(*args, **kwargs):
            self._begin("heldout")
            try:
                return evaluate(*args, **kwargs)
            finally:
                self._end("heldout")
                self.stamps["heldout_end"] = time.time()

        callback.evaluate = timed

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self._begin("sanity")

    def on_sanity_check_end(self, trainer, pl_module) -> None:
        self._end("sanity")

    def on_train_start(self, trainer, pl_module) -> None:
        self.stamps["train_start"] = time.time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._begin("steps")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end("steps")
        self.stamps["step_count"] += 1

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._begin("validation")

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._end("validation")

    def on_train_end(self, trainer, pl_module) -> None:
        self.stamps["train_end"] = time.time()

    def _write(self, path: Path) -> None:
        self.stamps["exit"] = time.time()
        if path.parent.is_dir():
            path.write_text(json.dumps(self.stamps, indent=1))
