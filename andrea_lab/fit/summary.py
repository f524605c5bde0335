"""RunSummary: at the end of every fit, ``summary.json`` in the run directory, the run's knobs and
the same figures in TensorBoard's HParams dashboard (andrea_lab.fit.hparams), and a few printed
lines saying where the run is and what to do next.

The file's schema is :class:`andrea_lab.runs.directory.RunRecord` (every reader uses the same class). It is
written atomically, also when the fit ends with an exception or Ctrl-C (status ``interrupted``, unless a
divergence already found ended the run: :func:`run_status`). Divergence, spikes, gradient norms and the unigram
loss come from the :class:`StabilityMonitor` of the same trainer (null/0 without one); the held-out loss and its
standard error from the :class:`HeldOutEvaluation` callback, run here once training is over (not after an
interruption: a Ctrl-C should end the process, not start an evaluation).
"""

from __future__ import annotations

import math
import os
import shlex
import time
import warnings
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import lightning as L
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from andrea_lab.errors import DivergenceError, reading_checkpoint_state
from andrea_lab.fit.closing_sample import TEMPERATURE, closing_sample, prompt_for
from andrea_lab.fit.compile_cache import compile_counters
from andrea_lab.fit.heldout import HeldOutEvaluation, format_heldout
from andrea_lab.fit.hparams import data_knobs, log_run_hparams, run_hparams, run_metrics, trainer_knobs, trial_name
from andrea_lab.fit.stability.events import (
    Divergence,
    DivergenceDetector,
    divergence_flags,
    outcome_flags,
    record_outcome,
)
from andrea_lab.fit.stability.monitor import StabilityMonitor
from andrea_lab.fit.stability.probe import attention_extremes
from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.model.registry import selected_entry_point
from andrea_lab.model.training_contracts import TRAINING_KINDS
from andrea_lab.runs import tags
from andrea_lab.runs.directory import NONFINITE, SUMMARY_FILE, RunRecord, finite_or_none, package_versions, write_record
from andrea_lab.runs.machine import machine_record


def _plugins(config: dict[str, Any], training: dict[str, Any]) -> dict[str, dict[str, Optional[str]]]:
    """Where each plugin of the run comes from: the model's parts, then the optimizer and schedule."""
    return {
        **{kind: plugin_provenance(kind, config[kind]) for kind in PLUGIN_KINDS if kind in config},
        **{
            kind: plugin_provenance(kind, training[kind])
            for kind in TRAINING_KINDS
            if isinstance(training.get(kind), str)
        },
    }


def plugin_provenance(kind: str, name: str) -> dict[str, Optional[str]]:
    """Where the plugin a config names comes from: its entry point's distribution, version and target.

    ``name`` may be a registered name (``pre``), a qualified one (``andrea-lab-example:squared_relu``)
    or an import path (``my_module:MyClass``, recorded with distribution and version null).
    """
    ep = selected_entry_point(kind, name)
    if ep is not None:
        return {
            "name": ep.name,
            "distribution": ep.dist.name if ep.dist is not None else None,
            "version": ep.dist.version if ep.dist is not None else None,
            "target": ep.value,
        }
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


def run_status(divergence: Optional[Divergence], interrupted: bool, ended_by_divergence: bool) -> str:
    """``finished``, ``diverged`` or ``interrupted``. A diverged run is done (the sweep never reruns it) only if
    the divergence is what ended it: the fit ran to its end, or ``ended_by_divergence`` (the monitor stops on
    divergence, or the non-finite guard raised :class:`DivergenceError`), or the divergence is a non-finite
    loss. A run that diverged, was going on to its end (``stability.stop_on_divergence: false``: its final loss
    is part of the result) and was then interrupted (SIGTERM, Ctrl-C, a crash) is ``interrupted``: it resumes
    from its checkpoint, which keeps the divergence."""
    if divergence is None:
        return "interrupted" if interrupted else "finished"
    ended_it = not interrupted or ended_by_divergence or NONFINITE in (divergence.kind, divergence.cause)
    return "diverged" if ended_it else "interrupted"


class RunSummary(L.Callback):
    """Write ``summary.json`` (and TensorBoard hparams metrics) at the end of every fit.

    Args:
        enabled: Set false to write nothing.
        filename: Always ``summary.json``; kept so that the config.yaml of older runs, which names it,
            still loads.
        hparams: Also log the run to TensorBoard's HParams dashboard: every knob of the config (model,
            data, the trainer settings that change training, plugins' distributions) as an hparam and the
            results as ``hparams/...`` metrics (andrea_lab.fit.hparams).
        val_metric: The logged validation loss to track.
        suite: The sweep suite this run belongs to (``andrea sweep`` sets it), an hparam to filter on.
        variant: The suite's variant this run trains (``andrea sweep`` sets it), an hparam to filter on.
    """

    def __init__(
        self,
        enabled: bool = True,
        hparams: bool = True,
        val_metric: str = tags.VAL_LOSS,
        filename: str = SUMMARY_FILE,
        suite: Optional[str] = None,
        variant: Optional[str] = None,
    ):
        super().__init__()
        if filename != SUMMARY_FILE:
            raise ValueError(
                f"summary.filename is {filename!r}, but the run record is always {SUMMARY_FILE!r} "
                "(andrea sweep and andrea compare read it by that name); remove the key"
            )
        self.enabled = enabled
        self.hparams = hparams
        self.val_metric = val_metric
        self.suite = suite
        self.variant = variant
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
        self.summary: Optional[RunRecord] = None
        self.path: Optional[Path] = None

    # ---------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        return {
            "initial_val_loss": self.initial_val_loss,
            "val_history": [list(v) for v in self.val_history],
            "tokens_seen": self.tokens_seen,
            "wall_time_s": self._wall_time(),
        }

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
            self.apply_state(state)

    def apply_state(self, state: Any) -> None:
        """Restore a checkpoint's state (what ``load_state_dict`` kept for ``on_train_start``); a malformed one
        is one CheckpointStateError. andrea_lab.fit.cli.check_callback_states applies it to a copy first, so
        that a resumed fit refuses it before writing anything."""
        with reading_checkpoint_state("run summary's"):
            initial = state["initial_val_loss"]
            self.initial_val_loss = None if initial is None else float(initial)
            self.val_history = [(int(s), float(v)) for s, v in state["val_history"]]
            self.tokens_seen = int(state["tokens_seen"])
            self.wall_time_before = float(state["wall_time_s"])

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
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
        # Only a fit that started has something to record: one that failed while being set up (a
        # refused run directory, a config it could not save) must not replace the record already there.
        if self._active and self._started is not None:
            try:
                self._finish(trainer, pl_module, interrupted=True, exception=exception)
            except Exception as exc:  # never mask the exception that ended the run
                warnings.warn(f"RunSummary could not write summary.json after {type(exception).__name__}: {exc}")

    # ------------------------------------------------------------- results

    def _wall_time(self) -> float:
        running = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.wall_time_before + running

    @staticmethod
    def _callback(trainer: L.Trainer, kind: type) -> Any:
        for callback in trainer.callbacks:
            if isinstance(callback, kind) and callback.enabled:
                return callback
        return None

    def build(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        interrupted: bool,
        exception: Optional[BaseException] = None,
    ) -> RunRecord:
        """The record of the run as it stands (the held-out evaluation runs here unless interrupted; ``exception``
        is what ended an interrupted fit)."""
        monitor = self._callback(trainer, StabilityMonitor)
        heldout_callback = self._callback(trainer, HeldOutEvaluation)
        heldout = None if interrupted or heldout_callback is None else heldout_callback.evaluate(trainer, pl_module)
        if monitor is not None:
            monitor.flush(trainer)
        detector = monitor.divergence_detector if monitor is not None else DivergenceDetector()
        finite = [(s, v) for s, v in self.val_history if math.isfinite(v)]
        best_step, best = min(finite, key=lambda sv: sv[1]) if finite else (None, None)
        final_step, final = self.val_history[-1] if self.val_history else (None, None)
        divergence, outcome = record_outcome(detector, self.initial_val_loss, best, (final_step, final), interrupted)
        stops = monitor is not None and monitor.stop_on_divergence
        status = run_status(divergence, interrupted, stops or isinstance(exception, DivergenceError))
        grad_max, grad_median = monitor.grad_norm_stats() if monitor is not None else (None, None)
        logger, config = trainer.logger, model_config_dict(pl_module)
        training = _training_settings(pl_module)
        seed = os.environ.get("PL_GLOBAL_SEED")
        datamodule = trainer.datamodule
        data_seed = getattr(datamodule, "seed", None) if datamodule is not None else None
        return RunRecord(
            status=status,
            experiment=None if logger is None else logger.name,
            version=None if logger is None else logger.version,
            initial_val_loss=finite_or_none(self.initial_val_loss),
            final_val_loss=finite_or_none(final),
            best_val_loss=finite_or_none(best),
            best_step=best_step,
            divergence=divergence.as_dict() if divergence is not None else {"step": None, "kind": None},
            outcome=outcome.as_dict(),
            spike_count=0 if monitor is None else monitor.spike_count,
            grad_norm_max=finite_or_none(grad_max),
            grad_norm_median=finite_or_none(grad_median),
            grad_norm_max_after_warmup=_max_after_warmup(monitor, training.get("warmup_steps")),
            tokens_seen=int(self.tokens_seen),
            steps=int(trainer.global_step),
            wall_time_s=round(self._wall_time(), 3),
            lr=_learning_rate(trainer, pl_module),
            seed=int(seed) if seed not in (None, "") else None,
            data_seed=int(data_seed) if isinstance(data_seed, int) else None,
            unigram_loss=None if monitor is None else finite_or_none(monitor.unigram_loss),
            probe=_last_probe(monitor),
            heldout=heldout,
            heldout_curve=[dict(point) for point in getattr(heldout_callback, "curve", [])],
            gave_way_first=[] if monitor is None else [record.as_dict() for record in monitor.gave_way],
            data=datamodule.provenance() if hasattr(datamodule, "provenance") else {},
            versions=package_versions(),
            machine=_machine(trainer, pl_module),
            training=_plain(training),
            plugins=_plugins(config, training),
            config=config,
        )

    def _finish(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        interrupted: bool,
        exception: Optional[BaseException] = None,
    ) -> None:
        summary = self.build(trainer, pl_module, interrupted, exception)
        self.summary = summary
        if not trainer.is_global_zero:
            return
        # The logger's own log_dir, not trainer.log_dir: that one is a collective broadcast, which
        # would wait forever for the other DDP ranks (they never reach this line).
        logger = trainer.logger
        log_dir = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None) or trainer.default_root_dir
        self.path = write_record(log_dir, summary)
        if self.hparams and not self._hparams_logged:
            self._log_hparams(trainer, summary, trial_name(log_dir, self.suite))
        prompt = prompt_for(summary.heldout.strata if summary.heldout else None)
        sample = None if self.suite or summary.status != "finished" else _sample_of(trainer, pl_module, prompt)
        rank_zero_info(closing_lines(summary, Path(log_dir), self.path, suite=self.suite, sample=sample))

    def _log_hparams(self, trainer: L.Trainer, summary: RunRecord, trial: str) -> None:
        knobs = run_hparams(summary, trainer_knobs(trainer), data_knobs(trainer.datamodule), self.suite, self.variant)
        # The flags' last points agree with the record, also when the end-of-fit check decided a divergence.
        metrics = {
            **run_metrics(summary),
            **divergence_flags(_divergence_of(summary)),
            **outcome_flags(summary.outcome),
            tags.NONFINITE: float(summary.nonfinite),
        }
        log_run_hparams(trainer, knobs, metrics, summary.status, summary.steps, trial)
        self._hparams_logged = True


def _machine(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
    """The record's ``machine`` (andrea_lab.runs.machine): this fit's precision and the device it ran on."""
    device = pl_module.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" and torch.cuda.is_available() else None
    record = machine_record(trainer.precision, device.type, name)
    cache = getattr(pl_module, "compile_cache", None)  # set where the model was compiled (AndreaLM.configure_model)
    if cache is not None:
        record["compile"] = {**cache.as_record(), **compile_counters()}
    return record


def _sample_of(trainer: L.Trainer, pl_module: L.LightningModule, prompt: str) -> Optional[str]:
    """The closing sample of a plain fit's model, ``prompt`` continued (:mod:`andrea_lab.fit.closing_sample`),
    None without a tokenizer."""
    try:
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
    except RuntimeError:  # a data module that never learned its tokenizer
        return None
    return closing_sample(getattr(pl_module, "model", pl_module), tokenizer, prompt)


def closing_lines(
    record: RunRecord, run_dir: Path, path: Path, suite: Optional[str] = None, sample: Optional[str] = None
) -> str:
    """What a fit prints last: where it is, how it ended, a few lines its model writes, what to run next (for
    a sweep's run, the next steps look at the whole suite, ``<suite>/<variant>/<run>``, not one variant's
    directory)."""
    if record.heldout is not None and record.heldout.loss is not None:
        loss = f"held-out loss {format_heldout(record.heldout)}"
        if record.heldout.bits_per_byte is not None:
            loss += f" = {record.heldout.bits_per_byte:.3f} bits per byte of text"
    else:
        final = "n/a" if record.final_val_loss is None else f"{record.final_val_loss:.3f}"
        loss = f"final val loss {final} (no held-out evaluation)"
    status = record.status
    if record.diverged:
        cause = f": {record.divergence_cause}" if record.divergence_cause else ""
        status += f" ({record.divergence_kind}{cause} at step {record.divergence_step})"
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    runs = run_dir.parent.parent if suite else run_dir.parent
    lines = [f"run: {run_dir}", f"status: {status} after {record.steps} steps; {loss}", f"record: {path}"]
    prompt = prompt_for(record.heldout.strata if record.heldout else None)  # the sample's, as _sample_of was given
    if sample:
        lines.append(f"sample ({prompt!r} continued; seeded, temperature {TEMPERATURE}):")
        lines.extend(f"    | {line}" for line in sample.splitlines())
    lines.append(
        f"next: tensorboard --logdir {runs}  # open http://localhost:6006/#custom_scalars (the loss curves first); "
        "#hparams: a row per run"
    )
    if checkpoint.is_file():
        lines.append(f"      andrea generate --ckpt {checkpoint} --prompt {shlex.quote(prompt)}")
    lines.append(f"      andrea compare {runs}")
    return "\n".join(lines)


def _divergence_of(record: RunRecord) -> Optional[Divergence]:
    if not record.diverged or record.divergence_kind is None:
        return None
    return Divergence(record.divergence_step or 0, record.divergence_kind, record.divergence_cause)


def _training_settings(pl_module: L.LightningModule) -> dict:
    """The module's hyperparameters less the architecture, with the schedule the run actually used: left unset
    in the config it is the optimizer's default, and a record that said ``None`` would hide which one ran."""
    hparams = dict(getattr(pl_module, "hparams", {}) or {})
    training = {key: value for key, value in hparams.items() if key != "config"}
    choice = getattr(pl_module, "optimizer_choice", None)
    if choice is not None and training.get("schedule") is None:
        training["schedule"] = choice.schedule_name
    return training


def _max_after_warmup(monitor: Optional[StabilityMonitor], warmup_steps: Any) -> Optional[float]:
    """The largest gradient norm after warmup (never step 0): the early steps measure initialisation."""
    if monitor is None:
        return None
    first = max(1, int(warmup_steps or 0))
    finite = [g for g in monitor.grad_norms[first:] if math.isfinite(g)]
    return max(finite) if finite else None


def _last_probe(monitor: Optional[StabilityMonitor]) -> dict[str, Any]:
    """The last probe's step and attention extremes (:func:`andrea_lab.fit.stability.probe.attention_extremes`); {} if
    none ran."""
    if monitor is None or not monitor.last_probe:
        return {}
    return {"step": monitor.last_probe_step, **attention_extremes(monitor.last_probe)}


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-ready hyperparameters: tuples as lists, mappings (a plugin's ``optimizer_args``) as plain dicts, so
    that each option is a knob of its own (``model.optimizer_args.momentum``), anything exotic as its string."""
    out = {}
    for key, value in values.items():
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, Mapping):
            out[key] = _plain(value)
        else:
            out[key] = value if isinstance(value, (int, float, str, bool, list, type(None))) else str(value)
    return out


def _learning_rate(trainer: L.Trainer, pl_module: L.LightningModule) -> Optional[float]:
    hparams = getattr(pl_module, "hparams", {}) or {}
    if hparams.get("lr") is not None:
        return float(hparams["lr"])
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            return float(group.get("initial_lr", group["lr"]))
    return None
