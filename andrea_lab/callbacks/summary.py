"""RunSummary: at the end of every fit, ``summary.json`` in the run directory and the same figures as
TensorBoard hparams metrics.

``summary.json`` is what ``andrea compare`` and ``andrea sweep`` read; its schema (version 1) is fixed:

.. code-block:: text

    {"schema": 1, "status": "finished" | "diverged" | "interrupted", "experiment": str|null,
     "version": int|str|null, "initial_val_loss": float|null, "final_val_loss": float|null,
     "best_val_loss": float|null, "best_step": int|null,
     "divergence": {"step": int|null, "kind": "nonfinite"|"stuck_at_unigram"|"final_above_best"|null},
     "spike_count": int, "grad_norm_max": float|null, "grad_norm_median": float|null,
     "tokens_seen": int, "steps": int, "wall_time_s": float, "lr": float, "seed": int|null,
     "data_seed": int|null, "unigram_loss": float|null,
     "plugins": {kind: {"name", "distribution", "version", "target"}}, "config": {AndreaConfig fields}}

The file is written atomically (a temporary file in the same directory, then ``os.replace``), also when
the fit ends with an exception or Ctrl-C (status ``interrupted``, unless a divergence was already found).
Divergence, spikes, gradient norms and the unigram loss come from the :class:`StabilityMonitor` of the same
trainer (null/0 without one).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Optional

import lightning as L

from andrea_lab.callbacks.events import DivergenceDetector
from andrea_lab.callbacks.stability import StabilityMonitor

SCHEMA_VERSION = 1
SUMMARY_FILENAME = "summary.json"
STATUSES = ("finished", "diverged", "interrupted")
SUMMARY_KEYS = ("schema", "status", "experiment", "version", "initial_val_loss", "final_val_loss", "best_val_loss",
                "best_step", "divergence", "spike_count", "grad_norm_max", "grad_norm_median", "tokens_seen",
                "steps", "wall_time_s", "lr", "seed", "data_seed", "unigram_loss", "plugins", "config")
PLUGIN_KINDS = ("norm_placement", "activation", "kernel_backend")


def _clean_float(value: Any) -> Optional[float]:
    """A finite float, or None (JSON has no NaN/inf; a non-finite loss is reported as a divergence)."""
    if value is None:
        return None
    value = float(value.item() if hasattr(value, "item") else value)
    return value if math.isfinite(value) else None


def plugin_provenance(kind: str, name: str) -> dict[str, Optional[str]]:
    """Where the plugin a config names comes from: its entry point's distribution, version and target.

    ``name`` may be a registered name (``pre``), a qualified one (``andrea-lab-example:squared_relu``)
    or an import path (``my_module:MyClass``, recorded with distribution and version null).
    """
    from andrea_lab import registry

    entry_points = registry._entry_points(kind)
    matches = [ep for ep in entry_points if ep.name == name]
    if not matches and ":" in name:
        dist, _, plain = name.partition(":")
        normal = re.sub(r"[-_.]+", "-", dist).lower()
        matches = [ep for ep in entry_points if ep.name == plain and ep.dist is not None
                   and re.sub(r"[-_.]+", "-", ep.dist.name).lower() == normal]
    if len(matches) == 1:
        ep = matches[0]
        return {"name": ep.name, "distribution": ep.dist.name if ep.dist is not None else None,
                "version": ep.dist.version if ep.dist is not None else None, "target": ep.value}
    return {"name": name, "distribution": None, "version": None, "target": name if ":" in name else None}


def model_config_dict(pl_module: L.LightningModule) -> dict[str, Any]:
    config = getattr(pl_module, "config", None)
    if is_dataclass(config) and not isinstance(config, type):
        return asdict(config)
    hparams = getattr(pl_module, "hparams", {}) or {}
    found = hparams.get("config")
    if is_dataclass(found) and not isinstance(found, type):
        return asdict(found)
    return dict(found) if isinstance(found, dict) else {}


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, allow_nan=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class RunSummary(L.Callback):
    """Write ``summary.json`` (and TensorBoard hparams metrics) at the end of every fit.

    Args:
        enabled: Set false to write nothing.
        filename: Name of the summary file in the run directory (the logger's ``log_dir``).
        hparams: Also log the results as TensorBoard hparams metrics (``hparams/...``) with the model
            config, learning rate and seeds as the hyperparameters.
        val_metric: The logged validation loss to track.
    """

    def __init__(self, enabled: bool = True, filename: str = SUMMARY_FILENAME, hparams: bool = True,
                 val_metric: str = "val/loss"):
        super().__init__()
        if not filename or Path(filename).name != filename:
            raise ValueError(f"summary.filename must be a plain file name, got {filename!r}")
        self.enabled = enabled
        self.filename = filename
        self.hparams = hparams
        self.val_metric = val_metric
        self._reset()

    def _reset(self) -> None:
        self.initial_val_loss: Optional[float] = None
        self.val_history: list[tuple[int, float]] = []  # (step, loss), the initial one at step 0 included
        self.tokens_seen = 0
        self.wall_time_before = 0.0  # from earlier segments of a resumed run
        self._started: Optional[float] = None
        self._active = False
        self._hparams_logged = False
        self._loaded_state: Optional[dict[str, Any]] = None
        self.summary: Optional[dict[str, Any]] = None
        self.path: Optional[Path] = None

    # ---------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        return {"initial_val_loss": self.initial_val_loss, "val_history": [list(v) for v in self.val_history],
                "tokens_seen": self.tokens_seen, "wall_time_s": self._wall_time()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded_state = state_dict

    # ---------------------------------------------------------------- hooks

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and self.enabled:
            loaded = self._loaded_state
            self._reset()
            self._loaded_state = loaded
            self._active = True

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active and self._loaded_state is not None:
            state, self._loaded_state = self._loaded_state, None
            self.initial_val_loss = state["initial_val_loss"]
            self.val_history = [(int(s), float(v)) for s, v in state["val_history"]]
            self.tokens_seen = int(state["tokens_seen"])
            self.wall_time_before = float(state["wall_time_s"])

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self._active:
            return
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if hasattr(x, "numel"):
            self.tokens_seen += int(x.numel()) * trainer.world_size

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active:
            return
        value = trainer.callback_metrics.get(self.val_metric)
        if value is None:
            return
        value = float(value)
        if trainer.sanity_checking:
            # The sanity check of a fresh fit scores the model before any update: the initial loss.
            if trainer.global_step == 0 and not self.val_history:
                self.initial_val_loss = value
                self.val_history.append((0, value))
            return
        self.val_history.append((trainer.global_step, value))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active:
            self._finish(trainer, pl_module, interrupted=False)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if self._active:
            try:
                self._finish(trainer, pl_module, interrupted=True)
            except Exception as exc:  # never mask the exception that ended the run
                warnings.warn(f"RunSummary could not write {self.filename} after {type(exception).__name__}: {exc}")

    # ------------------------------------------------------------- results

    def _wall_time(self) -> float:
        running = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.wall_time_before + running

    @staticmethod
    def _monitor(trainer: L.Trainer) -> Optional[StabilityMonitor]:
        for callback in trainer.callbacks:
            if isinstance(callback, StabilityMonitor) and callback.enabled:
                return callback
        return None

    def build(self, trainer: L.Trainer, pl_module: L.LightningModule, interrupted: bool) -> dict[str, Any]:
        """The summary dict (schema 1) for the run as it stands."""
        monitor = self._monitor(trainer)
        if monitor is not None:
            monitor.flush(trainer)
        detector = monitor.divergence_detector if monitor is not None else DivergenceDetector()
        finite = [(s, v) for s, v in self.val_history if math.isfinite(v)]
        best_step, best = min(finite, key=lambda sv: sv[1]) if finite else (None, None)
        final_step, final = self.val_history[-1] if self.val_history else (None, None)
        if final is not None and not interrupted:
            detector.check_final(final_step, final, best)
        divergence = detector.divergence
        status = "diverged" if divergence is not None else ("interrupted" if interrupted else "finished")
        grad_max, grad_median = monitor.grad_norm_stats() if monitor is not None else (None, None)
        logger = trainer.logger
        config = model_config_dict(pl_module)
        seed = os.environ.get("PL_GLOBAL_SEED")
        data_seed = getattr(trainer.datamodule, "seed", None) if trainer.datamodule is not None else None
        return {
            "schema": SCHEMA_VERSION,
            "status": status,
            "experiment": None if logger is None else logger.name,
            "version": None if logger is None else logger.version,
            "initial_val_loss": _clean_float(self.initial_val_loss),
            "final_val_loss": _clean_float(final),
            "best_val_loss": _clean_float(best),
            "best_step": best_step,
            "divergence": ({"step": divergence.step, "kind": divergence.kind} if divergence is not None
                           else {"step": None, "kind": None}),
            "spike_count": 0 if monitor is None else monitor.spike_count,
            "grad_norm_max": _clean_float(grad_max),
            "grad_norm_median": _clean_float(grad_median),
            "tokens_seen": int(self.tokens_seen),
            "steps": int(trainer.global_step),
            "wall_time_s": round(self._wall_time(), 3),
            "lr": _learning_rate(trainer, pl_module),
            "seed": int(seed) if seed not in (None, "") else None,
            "data_seed": int(data_seed) if isinstance(data_seed, int) else None,
            "unigram_loss": None if monitor is None else _clean_float(monitor.unigram_loss),
            "plugins": {kind: plugin_provenance(kind, config[kind]) for kind in PLUGIN_KINDS if kind in config},
            "config": config,
        }

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, interrupted: bool) -> None:
        summary = self.build(trainer, pl_module, interrupted)
        self.summary = summary
        if not trainer.is_global_zero:
            return
        # The logger's own log_dir, not trainer.log_dir: that one is a collective broadcast, which
        # would wait forever for the other DDP ranks (they never reach this line).
        logger = trainer.logger
        log_dir = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None) or trainer.default_root_dir
        self.path = Path(log_dir) / self.filename
        write_json_atomic(self.path, summary)
        if self.hparams and not self._hparams_logged:
            self._log_hparams(trainer, summary)

    def _log_hparams(self, trainer: L.Trainer, summary: dict[str, Any]) -> None:
        params = {"config": summary["config"], "lr": summary["lr"], "seed": summary["seed"],
                  "data_seed": summary["data_seed"]}
        metrics = {
            "hparams/final_val_loss": summary["final_val_loss"],
            "hparams/best_val_loss": summary["best_val_loss"],
            "hparams/initial_val_loss": summary["initial_val_loss"],
            "hparams/spike_count": float(summary["spike_count"]),
            "hparams/diverged": float(summary["status"] == "diverged"),
            "hparams/grad_norm_max": summary["grad_norm_max"],
            "hparams/steps": float(summary["steps"]),
        }
        metrics = {k: float(v) for k, v in metrics.items() if v is not None}
        for logger in trainer.loggers:
            if "metrics" not in inspect.signature(logger.log_hyperparams).parameters:
                continue  # e.g. CSVLogger: it has no hparams metrics, summary.json is the record
            logger.log_hyperparams(params, metrics=metrics, step=summary["steps"])
            logger.save()
        self._hparams_logged = True


def _learning_rate(trainer: L.Trainer, pl_module: L.LightningModule) -> Optional[float]:
    hparams = getattr(pl_module, "hparams", {}) or {}
    if hparams.get("lr") is not None:
        return float(hparams["lr"])
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            return float(group.get("initial_lr", group["lr"]))
    return None
