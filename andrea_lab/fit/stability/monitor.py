"""StabilityMonitor: the numbers that say whether (and where in depth) a training run is going wrong.

Two kinds of measurement, both logged under ``stability/`` (full list and definitions in
``docs/stability.md``):

* **every step**, without a host sync per step: the training loss of each batch and the global gradient
  norm before clipping are kept *on the device* and read back every ``flush_every`` steps, when they feed
  the spike and divergence detectors (:mod:`andrea_lab.fit.stability.events`) and the non-finite flag.
  The loss, learning rate and gradient norm curves themselves are AndreaLM's ``train/*`` scalars.
* **every ``interval`` steps, and at step 0 before any update**, on one fixed *probe batch* (the first
  validation batch): gradient norm per block and for the embeddings, update-to-weight ratio per block,
  residual-stream RMS after each block, each sublayer's change of the stream relative to the stream, the
  largest attention logit and the attention entropy per block, the output logits' max and log Z, dead MLP
  units, and the precursor signals (one function each in :mod:`.probe` and :mod:`.precursors`; which one
  gave way first before a divergence or spike: :mod:`.bands`). The probe runs in eval mode, under an
  isolated RNG, and takes its gradients with ``torch.autograd.grad`` (never ``.backward()``), so ``.grad``,
  the RNG streams and the training mode are as they were: a run with the monitor trains as one without.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Any, Optional

import lightning as L
import torch
from torch import nn

from andrea_lab.errors import DivergenceError, reading_checkpoint_state
from andrea_lab.fit.nonfinite import global_grad_norm, guard_of
from andrea_lab.fit.stability import precursors as signals
from andrea_lab.fit.stability import probe
from andrea_lab.fit.stability.bands import GaveWay, GaveWayRecorder
from andrea_lab.fit.stability.events import Divergence, DivergenceDetector, SpikeDetector, divergence_flags
from andrea_lab.fit.stability.layout import CUSTOM_SCALARS_LAYOUT
from andrea_lab.fit.stability.probe import PREFIX, measure_probe, param_groups
from andrea_lab.fit.stability.probe_batch import capture_probe_batch
from andrea_lab.fit.stability.settings import check_settings
from andrea_lab.fit.stability.unigram import measure_unigram_loss
from andrea_lab.model.transformer import Andrea
from andrea_lab.runs import tags


class StabilityMonitor(L.Callback):
    """Stability metrics and events for a training run (on by default in ``andrea fit``: YAML ``stability:``).

    Args:
        enabled: Set false to switch the whole monitor off (no probes, no detectors).
        interval: Run the probe every this many optimizer steps (and at step 0, before any update);
            0 disables the probe (the per-step detectors still run).
        flush_every: Read the per-step losses and gradient norms back from the device every this many
            steps (one host sync per flush), update the detectors and log the event scalars.
        probe: Which batch is the fixed probe batch: ``val`` (the first validation batch; falls back to
            ``train`` when there is no validation data) or ``train`` (the first training batch).
        probe_sequences: Use at most this many sequences of the probe batch (null: all of it).
        spike_threshold: A spike is a loss more than this many nats above its EMA.
        spike_ema_decay: Decay of that EMA per step.
        spike_warmup: Steps before a spike can be reported.
        stuck_patience: Steps the smoothed loss must stay at/above the unigram level to declare divergence.
        stuck_after: Steps before the stuck check starts; null = the module's ``warmup_steps`` (else 0).
        stuck_margin: Nats below the unigram loss that still count as "at" it.
        final_margin: A final validation loss at least this many nats above the best is a divergence.
        trained_margin: A run has *trained* once its smoothed loss is this many nats below the unigram loss;
            after that a failure is ``trained_then_diverged`` (docs/stability.md), never ``stuck_at_unigram``.
        rise_margin, rise_patience: A trained run's smoothed loss this many nats above its best for this many steps.
        blowup_margin: A run not yet trained whose smoothed loss stays this many nats above its first loss for
            ``stuck_patience`` steps is ``blew_up`` (the loss went up from where it started); such steps do not
            count towards ``stuck_at_unigram``.
        precursors: Measure the precursor signals on each probe (per-matrix update size, Adam's second
            moments against ε) and record, for every divergence and spike, which signal left its running
            band first and how many steps it led the loss (summary.json ``gave_way_first``).
        spectral_every: Estimate the top singular value of each block's weights and update on every this many
            probes (power iteration; 0 = never).
        band_width: A signal has left its band at this many standard deviations (of log|signal|).
        band_horizon: An excursion that began more than this many steps before an event is not its precursor.
        unigram_loss: The unigram loss of the training data in nats; null = measure it from the data
            module's training tokens (a sample of ``unigram_sample_tokens``), else ln(vocab_size).
        unigram_sample_tokens: Tokens read to measure the unigram loss.
        stop_on_divergence: Stop training once a divergence is declared, except a rise (``Divergence.stops_a_run``).
        custom_scalars: Write the TensorBoard custom-scalars layout (per-layer curves on shared charts).
    """

    def __init__(
        self,
        enabled: bool = True,
        interval: int = 50,
        flush_every: int = 10,
        probe: str = "val",
        probe_sequences: Optional[int] = 8,
        spike_threshold: float = 0.5,
        spike_ema_decay: float = 0.95,
        spike_warmup: int = 20,
        stuck_patience: int = 100,
        stuck_after: Optional[int] = None,
        stuck_margin: float = 0.1,
        final_margin: float = 1.0,
        trained_margin: float = 0.5,
        rise_margin: float = 0.5,
        rise_patience: int = 50,
        blowup_margin: float = 1.0,
        precursors: bool = True,
        spectral_every: int = 4,
        band_width: float = 4.0,
        band_horizon: int = 500,
        unigram_loss: Optional[float] = None,
        unigram_sample_tokens: int = 1_000_000,
        stop_on_divergence: bool = False,
        custom_scalars: bool = True,
    ):
        super().__init__()
        check_settings(interval, flush_every, probe, probe_sequences, unigram_sample_tokens, spectral_every)
        # Build the detectors and bands once here so that bad thresholds fail at construction, not mid-run.
        self.spike_options = (spike_threshold, spike_ema_decay, spike_warmup)
        SpikeDetector(*self.spike_options)
        self.divergence_options = dict(
            stuck_patience=stuck_patience,
            stuck_margin=stuck_margin,
            final_margin=final_margin,
            trained_margin=trained_margin,
            rise_margin=rise_margin,
            rise_patience=rise_patience,
            blowup_margin=blowup_margin,
        )
        DivergenceDetector(None, stuck_after or 0, **self.divergence_options)
        self.band_options = dict(width=band_width, horizon=band_horizon, linear=signals.LINEAR_SIGNALS)
        GaveWayRecorder(signals.is_signal, signals.MAX_SPIKES, **self.band_options)
        self.enabled, self.interval, self.flush_every = enabled, interval, flush_every
        self.probe, self.probe_sequences = probe, probe_sequences
        self.precursors, self.spectral_every = precursors, spectral_every
        self.stuck_after = stuck_after
        self.unigram_loss_setting, self.unigram_sample_tokens = unigram_loss, unigram_sample_tokens
        self.stop_on_divergence, self.custom_scalars = stop_on_divergence, custom_scalars
        self._reset()

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        self.spikes = SpikeDetector(*self.spike_options)
        self.divergence_detector = DivergenceDetector(None, self.stuck_after or 0, **self.divergence_options)
        self.unigram_loss: Optional[float] = self.unigram_loss_setting
        self.grad_norms: list[float] = []
        self.nonfinite_steps = 0
        self._pending: list[tuple[int, torch.Tensor, Optional[torch.Tensor]]] = []
        self._batch_step: Optional[int] = None
        self._batch_grad_norm: Optional[torch.Tensor] = None
        self._batch_loss: Optional[torch.Tensor] = None
        self._skip_nonfinite = False
        self._probe_batch: Optional[tuple[torch.Tensor, Optional[torch.Tensor]]] = None
        self._last_probe_step: Optional[int] = None
        self._snapshot: Optional[tuple[int, dict[str, list[torch.Tensor]]]] = None
        self._loaded_state: Optional[dict[str, Any]] = None
        self._layout_written = False
        self.probe_seconds: list[float] = []
        self.last_probe: dict[str, float] = {}
        self.recorder = GaveWayRecorder(signals.is_signal, signals.MAX_SPIKES, **self.band_options)
        self._probes_done = 0

    @property
    def last_probe_step(self) -> Optional[int]:
        """The optimizer step of the last probe (:attr:`last_probe` holds its values), None before the first."""
        return self._last_probe_step if self.last_probe else None

    @property
    def spike_count(self) -> int:
        return self.spikes.count

    @property
    def divergence(self) -> Optional[Divergence]:
        return self.divergence_detector.divergence

    def grad_norm_stats(self) -> tuple[Optional[float], Optional[float]]:
        """(max, median) of the finite per-step global gradient norms seen so far."""
        finite = [g for g in self.grad_norms if math.isfinite(g)]
        if not finite:
            return None, None
        return max(finite), statistics.median(finite)

    def state_dict(self) -> dict[str, Any]:
        return {
            "spikes": self.spikes.state_dict(),
            "divergence": self.divergence_detector.state_dict(),
            "grad_norms": list(self.grad_norms),
            "nonfinite_steps": self.nonfinite_steps,
            "gave_way": self.recorder.state_dict(),
            "probes_done": self._probes_done,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Applied at on_train_start: some strategies restore callbacks before setup, some after.
        self._loaded_state = state_dict

    # ------------------------------------------------------------------ hooks

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.enabled:
            return
        loaded = self._loaded_state
        self._reset()
        self._loaded_state = loaded
        self.divergence_detector.stuck_after = self._stuck_after(pl_module)
        # A module whose non-finite guard skips (AndreaLM(on_nonfinite="skip")) drops a non-finite step and
        # goes on: that is counted, not a divergence, unless the module gives up (its DivergenceError,
        # seen in on_exception).
        guard = guard_of(pl_module)
        self._skip_nonfinite = guard is not None and guard.skips
        if self.unigram_loss is None:
            self.unigram_loss = measure_unigram_loss(trainer, _andrea_of(pl_module), self.unigram_sample_tokens)
        self.divergence_detector.unigram_loss = self.unigram_loss
        self.recorder.bands.after = self.divergence_detector.stuck_after

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled and self.custom_scalars and trainer.is_global_zero:
            self._write_layout(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled or self._loaded_state is None:
            return
        state, self._loaded_state = self._loaded_state, None
        self.apply_state(state)

    def apply_state(self, state: Any) -> None:
        """Restore a checkpoint's state (what ``load_state_dict`` kept for ``on_train_start``); a malformed one
        is one CheckpointStateError. andrea_lab.fit.cli.check_callback_states applies it to a copy first, so
        that a resumed fit refuses it before writing anything."""
        with reading_checkpoint_state("stability monitor's"):
            self.spikes.load_state_dict(state["spikes"])
            self.divergence_detector.load_state_dict(state["divergence"])
            self.grad_norms = [float(norm) for norm in state["grad_norms"]]
            self.nonfinite_steps = _count(state["nonfinite_steps"])
            self.recorder.load_state_dict(state.get("gave_way", {}))  # none in checkpoints from before the record
            self._probes_done = _count(state.get("probes_done", 0))

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self.enabled:
            return
        step = trainer.global_step
        self._batch_step = step
        self._batch_loss = self._batch_grad_norm = None
        if (
            self.interval
            and step % self.interval == 0
            and step != self._last_probe_step
            and trainer.is_global_zero
            and _andrea_of(pl_module) is not None
        ):
            self._last_probe_step = step
            if self._probe_batch is None:
                self._probe_batch = capture_probe_batch(trainer, pl_module, batch, self.probe, self.probe_sequences)
            self._run_probe(trainer, pl_module, step)

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if self.enabled and isinstance(loss, torch.Tensor):
            # Lightning divides the loss by accumulate_grad_batches; undo it to get the batch's loss.
            self._batch_loss = loss.detach().float() * trainer.accumulate_grad_batches

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        if not self.enabled or guard_of(pl_module) is not None:
            # The module's guard (a callback of the module, so called after this trainer callback) measures
            # this norm in its own on_before_optimizer_step: read from it at batch end.
            return
        # Called after backward and before gradient clipping: the raw global norm, kept on the device.
        norm = global_grad_norm(pl_module.parameters())
        if norm is not None:
            self._batch_grad_norm = norm.float()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.enabled:
            return
        guard = guard_of(pl_module)
        if guard is not None:
            self._batch_grad_norm = guard.last_grad_norm
        self._push_batch()
        if self._snapshot is not None and trainer.global_step > self._snapshot[0]:
            self._log_update_ratios(trainer, pl_module)
        if len(self._pending) >= self.flush_every:
            self.flush(trainer)

    def _push_batch(self) -> None:
        """Queue the current batch's loss and gradient norm (device tensors) for the next flush."""
        if self._batch_loss is not None and self._batch_step is not None:
            self._pending.append((self._batch_step, self._batch_loss, self._batch_grad_norm))
        self._batch_loss = self._batch_grad_norm = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled:
            self.flush(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not self.enabled:
            return
        try:
            self._push_batch()  # the batch that raised (e.g. AndreaLM's DivergenceError) counts too
            self.flush(trainer)
            if isinstance(exception, DivergenceError) and self.divergence is None and self._batch_step is not None:
                self.divergence_detector.nonfinite(self._batch_step)
        except Exception as exc:  # never mask the original exception
            warnings.warn(f"StabilityMonitor could not flush after {type(exception).__name__}: {exc}")

    # ------------------------------------------------------------ per step

    def flush(self, trainer: L.Trainer) -> None:
        """Read the pending per-step values back (one host sync), feed the detectors, log the events."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        losses = torch.stack([loss.reshape(()) for _, loss, _ in pending])
        norms = [g for _, _, g in pending]
        has_norm = [g is not None for g in norms]
        norm_values = (
            torch.stack([g.reshape(()).to(losses.device) for g in norms if g is not None]) if any(has_norm) else None
        )
        loss_list = losses.cpu().tolist()
        norm_list = norm_values.cpu().tolist() if norm_values is not None else []
        norm_iter = iter(norm_list)
        window_nonfinite = 0
        newly_diverged: Optional[Divergence] = None
        for (step, _, _), loss, present in zip(pending, loss_list, has_norm):
            grad_norm = next(norm_iter) if present else None
            if grad_norm is not None:
                self.grad_norms.append(grad_norm)
            bad = not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm))
            if bad:
                window_nonfinite += 1
            if self.spikes.update(step, loss):
                self._attribute(trainer, "spike", step)
            found = (
                None
                if self._skip_nonfinite and not math.isfinite(loss)
                else self.divergence_detector.update(step, loss)
            )
            if bad and found is None and not self._skip_nonfinite:
                found = self.divergence_detector.nonfinite(step)
            newly_diverged = newly_diverged or found
        self.nonfinite_steps += window_nonfinite
        if newly_diverged is not None:
            self._attribute(trainer, "divergence", newly_diverged.step)
        last_step = pending[-1][0]
        metrics = {
            tags.NONFINITE: float(window_nonfinite > 0),
            tags.SPIKES: float(self.spikes.count),
            **divergence_flags(self.divergence),
        }
        if self.spikes.ema is not None:
            metrics[tags.LOSS_EMA] = self.spikes.ema
        self._log(trainer, metrics, last_step)
        if newly_diverged is not None and self.stop_on_divergence and newly_diverged.stops_a_run:
            trainer.should_stop = True

    # ------------------------------------------------------------ the probe

    def _run_probe(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int) -> None:
        model = _andrea_of(pl_module)
        assert model is not None and self._probe_batch is not None
        started = time.perf_counter()
        x, y = self._probe_batch
        with probe.eval_mode(pl_module):  # the whole LightningModule, not only the model inside it
            values = measure_probe(model, x, y, autocast=trainer.precision_plugin.forward_context())
        if self.precursors:
            values.update(signals.measure_optimizer(model, trainer.optimizers))
        # Snapshot the weights; the update ratio is measured after this step's optimizer step.
        self._snapshot = (
            step,
            {
                key: [p.detach().clone() for _, p in members]
                for key, members in param_groups(model).items()
                if key != "head"
            },
            signals.snapshot_matrices(model) if self.precursors else None,
        )
        self._probes_done += 1
        self._feed_bands(step, values)
        seconds = time.perf_counter() - started
        self.probe_seconds.append(seconds)
        metrics = {f"{PREFIX}/{k}": v for k, v in values.items()}
        metrics[probe.PROBE_SECONDS] = seconds
        self._log(trainer, metrics, step)
        self.last_probe = metrics

    def _log_update_ratios(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert self._snapshot is not None
        step, before, matrices = self._snapshot
        self._snapshot = None
        spectral = bool(self.spectral_every) and (self._probes_done - 1) % self.spectral_every == 0
        values = probe.measure_updates(_andrea_of(pl_module), before)
        if matrices is not None:
            values.update(signals.measure_matrix_updates(_andrea_of(pl_module), matrices, spectral))
        self._feed_bands(step, values)
        self._log(trainer, {f"{PREFIX}/{k}": v for k, v in values.items()}, step)

    def _feed_bands(self, step: int, values: dict[str, float]) -> None:
        if self.precursors:
            self.recorder.feed(step, values)

    @property
    def gave_way(self) -> list[GaveWay]:
        """For the divergence and the first spikes: which signal gave way first (summary.json ``gave_way_first``)."""
        return self.recorder.records

    def _attribute(self, trainer: L.Trainer, event: str, step: int) -> None:
        """Record which signal gave way first before this divergence or spike and log its lead in steps at the
        event's step (``stability/gave_way_first/<signal>``)."""
        record = self.recorder.attribute(event, step) if self.precursors else None
        if record is not None and record.signal is not None:
            self._log(trainer, {f"{tags.GAVE_WAY_FIRST}/{record.signal}": float(record.lead_steps)}, step)

    # ------------------------------------------------------------ helpers

    def _stuck_after(self, pl_module: L.LightningModule) -> int:
        if self.stuck_after is not None:
            return self.stuck_after
        hparams = getattr(pl_module, "hparams", {}) or {}
        try:
            return int(hparams.get("warmup_steps") or 0)
        except (TypeError, ValueError):
            return 0

    def _write_layout(self, trainer: L.Trainer) -> None:
        for logger in trainer.loggers:
            writer = getattr(logger, "experiment", None)
            if hasattr(writer, "add_custom_scalars"):
                writer.add_custom_scalars(CUSTOM_SCALARS_LAYOUT)
                self._layout_written = True

    @staticmethod
    def _log(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
        if not trainer.is_global_zero or not metrics:
            return
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


def _andrea_of(pl_module: nn.Module) -> Optional[Andrea]:
    """The Andrea model of an AndreaLM (``.model``), or the module itself if it is one; else None (no probe)."""
    model = getattr(pl_module, "model", pl_module)
    return model if isinstance(model, Andrea) else None


def _count(value: Any) -> int:
    """A count restored from a checkpoint: a non-negative int, else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count (an int >= 0), got {value!r}")
    return value
