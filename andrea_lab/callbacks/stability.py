"""StabilityMonitor: the numbers that say whether (and where in depth) a training run is going wrong.

Two kinds of measurement, both logged under ``stability/`` (full list and definitions in
``docs/stability.md``):

* **every step**, without a host sync per step: the training loss of each batch and the global gradient
  norm before clipping are kept *on the device* and read back every ``flush_every`` steps, when they feed
  the spike and divergence detectors (:mod:`andrea_lab.callbacks.events`) and the non-finite flag.
  The loss, learning rate and gradient norm curves themselves are AndreaLM's ``train/*`` scalars.
* **every ``interval`` steps, and at step 0 before any update**, on one fixed *probe batch* (the first
  validation batch): gradient norm per block and for the embeddings, update-to-weight ratio per block,
  residual-stream RMS after each block, each sublayer's change of the stream relative to the stream,
  the largest attention logit per block, the output logits' max and log Z, and the fraction of dead MLP
  units. The probe runs with the model in eval mode, under an isolated RNG, and takes its gradients with
  ``torch.autograd.grad`` (never ``.backward()``), so parameters' ``.grad``, the RNG streams and the
  training mode are exactly as they were: a run with the monitor trains identically to one without.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities.seed import isolate_rng
from torch import nn

from andrea_lab.callbacks.events import Divergence, DivergenceDetector, SpikeDetector, unigram_entropy
from andrea_lab.errors import DivergenceError

PREFIX = "stability"
_LOGIT_BUDGET = 1 << 26  # attention scores materialised at once by the probe (float32: 256 MiB)

#: TensorBoard custom-scalars layout: one chart per group of per-layer curves (tags are regexes), so every
#: block of every selected run lands in the same chart.
CUSTOM_SCALARS_LAYOUT: dict[str, dict[str, list]] = {
    "stability: loss and events": {
        "loss (train, val, EMA)": ["Multiline", [r"^train/loss$", r"^val/loss$", r"^stability/loss_ema$"]],
        "spikes (cumulative), non-finite flag, diverged": ["Multiline", [r"^stability/spikes$", r"^stability/nonfinite$",
                                                                       r"^stability/diverged$"]],
        "global gradient norm before clipping": ["Multiline", [r"^train/grad_norm$"]],
        "learning rate": ["Multiline", [r"^train/lr$"]],
    },
    "stability: gradients and updates (probe)": {
        "gradient norm per block, embeddings, head": ["Multiline", [r"^stability/grad_norm/.*"]],
        "update / weight per block": ["Multiline", [r"^stability/update_ratio/.*"]],
    },
    "stability: residual stream (probe)": {
        "stream RMS after each block": ["Multiline", [r"^stability/stream_rms/.*"]],
        "attention delta / stream": ["Multiline", [r"^stability/delta_ratio/.*_attn$"]],
        "MLP delta / stream": ["Multiline", [r"^stability/delta_ratio/.*_mlp$"]],
    },
    "stability: logits and units (probe)": {
        "max attention logit per block": ["Multiline", [r"^stability/attn_logit_max/.*"]],
        "output logit max and log Z": ["Multiline", [r"^stability/logit_max$", r"^stability/log_z$"]],
        "dead MLP units per block": ["Multiline", [r"^stability/dead_fraction/.*"]],
        "probe loss and cost": ["Multiline", [r"^stability/probe_loss$", r"^stability/probe_seconds$"]],
    },
}


def block_tag(i: int) -> str:
    return f"block_{i:02d}"


def _frobenius(tensors: list[torch.Tensor]) -> torch.Tensor:
    """sqrt of the sum of squares of all entries of all tensors, in float32, on their device."""
    if not tensors:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors]))


def _inputs_of(batch: Any) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    if isinstance(batch, (tuple, list)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    if isinstance(batch, dict):
        return batch["input_ids"] if "input_ids" in batch else batch["x"], batch.get("targets", batch.get("y"))
    return batch, None


def sample_unigram_loss(tokens: Any, vocab_size: int, max_tokens: int = 1_000_000, chunks: int = 16) -> float:
    """Unigram entropy (nats) of a token stream, from ``chunks`` evenly spaced contiguous slices holding
    at most ``max_tokens`` tokens in all. ``tokens`` supports ``len`` and contiguous slicing (a numpy
    array, a memmap, :class:`andrea_lab.data.token_file.MappedTokens`)."""
    total = len(tokens)
    if total == 0:
        raise ValueError("no tokens to estimate the unigram loss from")
    if total <= max_tokens:
        parts = [np.asarray(tokens[0:total])]
    else:
        size = max(1, max_tokens // chunks)
        starts = np.linspace(0, total - size, chunks).astype(np.int64)
        parts = [np.asarray(tokens[int(s):int(s) + size]) for s in starts]
    counts = np.bincount(np.concatenate(parts).astype(np.int64), minlength=vocab_size)
    return unigram_entropy(counts.tolist())


def _train_token_stream(datamodule: Any) -> Any:
    """The training token stream of a data module, if it exposes one (``AndreaDataModule.train_token_stream``)."""
    try:
        stream = getattr(datamodule, "train_token_stream", None)
    except RuntimeError:  # not set up yet
        return None
    return stream if stream is not None and hasattr(stream, "__len__") else None


class _ProbeHooks:
    """Forward hooks that turn one probe forward pass into per-block statistics (device tensors)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.values: dict[str, torch.Tensor] = {}
        self.embedded: Optional[torch.Tensor] = None
        self._handles: list[Any] = []

    def __enter__(self) -> "_ProbeHooks":
        model = self.model
        if hasattr(model, "embed_dropout"):
            self._handles.append(model.embed_dropout.register_forward_hook(self._keep_embedded))
        for i, block in enumerate(model.blocks):
            tag = block_tag(i)
            self._handles.append(block.register_forward_hook(self._stream_rms(tag)))
            for part in ("attn", "mlp"):
                wrapper = getattr(block, part, None)
                if wrapper is None:
                    continue
                self._handles.append(wrapper.register_forward_hook(self._delta_ratio(f"{tag}_{part}")))
                sublayer = getattr(wrapper, "sublayer", None)
                if part == "attn" and hasattr(sublayer, "qkv") and hasattr(sublayer, "n_head"):
                    self._handles.append(sublayer.qkv.register_forward_hook(
                        self._attention_logit_max(tag, sublayer.n_head)))
                if part == "mlp" and isinstance(getattr(sublayer, "activation", None), nn.Module):
                    self._handles.append(sublayer.activation.register_forward_hook(self._dead_fraction(tag)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _keep_embedded(self, module, inputs, output) -> None:
        self.embedded = output  # kept with its graph: the probe differentiates the loss with respect to it

    def _stream_rms(self, tag: str):
        def hook(module, inputs, output) -> None:
            with torch.no_grad():
                self.values[f"stream_rms/{tag}"] = output.detach().float().pow(2).mean().sqrt()
        return hook

    def _delta_ratio(self, key: str):
        def hook(module, inputs, output) -> None:
            with torch.no_grad():
                x = inputs[0].detach().float()
                delta = output.detach().float() - x
                self.values[f"delta_ratio/{key}"] = (torch.linalg.vector_norm(delta)
                                                     / torch.linalg.vector_norm(x).clamp_min(1e-30))
        return hook

    def _attention_logit_max(self, tag: str, n_head: int):
        def hook(module, inputs, output) -> None:
            with torch.no_grad():
                B, T, three_c = output.shape
                C = three_c // 3
                hs = C // n_head
                q, k, _ = output.detach().float().split(C, dim=2)
                q = q.reshape(B, T, n_head, hs).transpose(1, 2)
                k = k.reshape(B, T, n_head, hs).transpose(1, 2)
                future = torch.ones(T, T, dtype=torch.bool, device=output.device).triu(1)
                best = torch.full((), -math.inf, device=output.device)
                heads = max(1, _LOGIT_BUDGET // (B * T * T))  # heads per matmul: at most ~64M scores at once
                for h in range(0, n_head, heads):
                    scores = q[:, h:h + heads] @ k[:, h:h + heads].transpose(-1, -2)  # (B, heads, T, T)
                    best = torch.maximum(best, scores.masked_fill_(future, -math.inf).amax())
                self.values[f"attn_logit_max/{tag}"] = best / math.sqrt(hs)  # a positive scale: max commutes
        return hook

    def _dead_fraction(self, tag: str):
        def hook(module, inputs, output) -> None:
            with torch.no_grad():
                alive = (output.detach() != 0).reshape(-1, output.shape[-1]).any(dim=0)
                self.values[f"dead_fraction/{tag}"] = 1.0 - alive.float().mean()
        return hook


@contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode inside, each restored to its own previous mode after."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


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
        unigram_loss: The unigram loss of the training data in nats; null = measure it from the data
            module's training tokens (a sample of ``unigram_sample_tokens``), else ln(vocab_size).
        unigram_sample_tokens: Tokens read to measure the unigram loss.
        stop_on_divergence: Stop training (``trainer.should_stop``) once a divergence is declared.
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
        unigram_loss: Optional[float] = None,
        unigram_sample_tokens: int = 1_000_000,
        stop_on_divergence: bool = False,
        custom_scalars: bool = True,
    ):
        super().__init__()
        if interval < 0:
            raise ValueError(f"stability.interval must be >= 0 (0 = no probe), got {interval!r}")
        if flush_every < 1:
            raise ValueError(f"stability.flush_every must be >= 1, got {flush_every!r}")
        if probe not in ("val", "train"):
            raise ValueError(f"stability.probe must be 'val' or 'train', got {probe!r}")
        if probe_sequences is not None and probe_sequences < 1:
            raise ValueError(f"stability.probe_sequences must be >= 1 or null, got {probe_sequences!r}")
        if unigram_sample_tokens < 1:
            raise ValueError(f"stability.unigram_sample_tokens must be >= 1, got {unigram_sample_tokens!r}")
        # Build the detectors once here so that bad thresholds fail at construction, not mid-run.
        SpikeDetector(spike_threshold, spike_ema_decay, spike_warmup)
        DivergenceDetector(None, stuck_after or 0, stuck_patience, stuck_margin, final_margin=final_margin)
        self.enabled = enabled
        self.interval = interval
        self.flush_every = flush_every
        self.probe = probe
        self.probe_sequences = probe_sequences
        self.spike_threshold = spike_threshold
        self.spike_ema_decay = spike_ema_decay
        self.spike_warmup = spike_warmup
        self.stuck_patience = stuck_patience
        self.stuck_after = stuck_after
        self.stuck_margin = stuck_margin
        self.final_margin = final_margin
        self.unigram_loss_setting = unigram_loss
        self.unigram_sample_tokens = unigram_sample_tokens
        self.stop_on_divergence = stop_on_divergence
        self.custom_scalars = custom_scalars
        self._reset()

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        self.spikes = SpikeDetector(self.spike_threshold, self.spike_ema_decay, self.spike_warmup)
        self.divergence_detector = DivergenceDetector(None, self.stuck_after or 0, self.stuck_patience,
                                                      self.stuck_margin, final_margin=self.final_margin)
        self.unigram_loss: Optional[float] = self.unigram_loss_setting
        self.unigram_source: Optional[str] = "given" if self.unigram_loss_setting is not None else None
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
        self.last_update_ratios: dict[str, float] = {}

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
        return {"spikes": self.spikes.state_dict(), "divergence": self.divergence_detector.state_dict(),
                "grad_norms": list(self.grad_norms), "nonfinite_steps": self.nonfinite_steps}

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
        # AndreaLM(on_nonfinite="skip") drops a non-finite step and goes on: that is counted, not a
        # divergence, unless the module gives up (its DivergenceError, seen in on_exception).
        self._skip_nonfinite = (getattr(pl_module, "hparams", {}) or {}).get("on_nonfinite") == "skip"
        if self.unigram_loss is None:
            self.unigram_loss, self.unigram_source = self._measure_unigram_loss(trainer, pl_module)
        self.divergence_detector.unigram_loss = self.unigram_loss

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled and self.custom_scalars and trainer.is_global_zero:
            self._write_layout(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled or self._loaded_state is None:
            return
        state, self._loaded_state = self._loaded_state, None
        self.spikes.load_state_dict(state["spikes"])
        self.divergence_detector.load_state_dict(state["divergence"])
        self.grad_norms = list(state["grad_norms"])
        self.nonfinite_steps = state["nonfinite_steps"]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if not self.enabled:
            return
        step = trainer.global_step
        self._batch_step = step
        self._batch_loss = self._batch_grad_norm = None
        if (self.interval and step % self.interval == 0 and step != self._last_probe_step
                and trainer.is_global_zero and _andrea_of(pl_module) is not None):
            self._last_probe_step = step
            if self._probe_batch is None:
                self._probe_batch = self._capture_probe_batch(trainer, pl_module, batch)
            self._run_probe(trainer, pl_module, step)

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if self.enabled and isinstance(loss, torch.Tensor):
            # Lightning divides the loss by accumulate_grad_batches; undo it to get the batch's loss.
            self._batch_loss = loss.detach().float() * trainer.accumulate_grad_batches

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        if not self.enabled or hasattr(pl_module, "last_grad_norm"):
            return  # AndreaLM computes this norm in its own hook (run after this one): read it at batch end
        # Called after backward and before gradient clipping: the raw global norm, kept on the device.
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self._batch_grad_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self.enabled:
            return
        if hasattr(pl_module, "last_grad_norm"):
            self._batch_grad_norm = pl_module.last_grad_norm
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
        norm_values = (torch.stack([g.reshape(()).to(losses.device) for g in norms if g is not None])
                       if any(has_norm) else None)
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
            self.spikes.update(step, loss)
            found = (None if self._skip_nonfinite and not math.isfinite(loss)
                     else self.divergence_detector.update(step, loss))
            if bad and found is None and not self._skip_nonfinite:
                found = self.divergence_detector.nonfinite(step)
            newly_diverged = newly_diverged or found
        self.nonfinite_steps += window_nonfinite
        last_step = pending[-1][0]
        metrics = {f"{PREFIX}/nonfinite": float(window_nonfinite > 0),
                   f"{PREFIX}/spikes": float(self.spikes.count),
                   f"{PREFIX}/diverged": float(self.divergence is not None)}
        if self.spikes.ema is not None:
            metrics[f"{PREFIX}/loss_ema"] = self.spikes.ema
        self._log(trainer, metrics, last_step)
        if newly_diverged is not None and self.stop_on_divergence:
            trainer.should_stop = True

    # ------------------------------------------------------------ the probe

    def _capture_probe_batch(self, trainer: L.Trainer, pl_module: L.LightningModule, train_batch: Any
                             ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        batch = None
        if self.probe == "val":
            with isolate_rng():  # creating a DataLoader iterator draws from the global RNG
                batch = self._first_val_batch(trainer)
        if batch is None:
            batch = train_batch
        x, y = _inputs_of(batch)
        if self.probe_sequences is not None:
            x = x[: self.probe_sequences]
            y = None if y is None else y[: self.probe_sequences]
        device = pl_module.device
        return x.detach().to(device).clone(), (None if y is None else y.detach().to(device).clone())

    @staticmethod
    def _first_val_batch(trainer: L.Trainer) -> Any:
        loaders = []
        datamodule = trainer.datamodule
        if datamodule is not None:
            try:
                loaders.append(datamodule.val_dataloader())  # a fresh loader: the trainer's is left untouched
            except Exception:
                pass
        if trainer.val_dataloaders is not None:
            loaders.append(trainer.val_dataloaders)
        for loader in loaders:
            if isinstance(loader, (list, tuple)):
                loader = loader[0] if loader else None
            if loader is None:
                continue
            try:
                return next(iter(loader))
            except (StopIteration, TypeError):
                continue
        return None

    def _run_probe(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int) -> None:
        model = _andrea_of(pl_module)
        assert model is not None and self._probe_batch is not None
        started = time.perf_counter()
        x, y = self._probe_batch
        with _eval_mode(pl_module):  # the whole LightningModule, not only the model inside it
            values = measure_probe(model, x, y, autocast=trainer.precision_plugin.forward_context())
        # Snapshot the weights; the update ratio is measured after this step's optimizer step.
        self._snapshot = (step, {key: [p.detach().clone() for _, p in members]
                                 for key, members in param_groups(model).items() if key != "head"})
        seconds = time.perf_counter() - started
        self.probe_seconds.append(seconds)
        metrics = {f"{PREFIX}/{k}": v for k, v in values.items()}
        metrics[f"{PREFIX}/probe_seconds"] = seconds
        self._log(trainer, metrics, step)
        self.last_probe = metrics

    def _log_update_ratios(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert self._snapshot is not None
        step, before = self._snapshot
        self._snapshot = None
        model = _andrea_of(pl_module)
        groups = param_groups(model)
        values = {}
        with torch.no_grad():
            for key, old in before.items():
                new = [p.detach() for _, p in groups.get(key, [])]
                if len(new) != len(old):
                    continue
                delta = _frobenius([n.float() - o.float() for n, o in zip(new, old)])
                values[f"update_ratio/{key}"] = delta / _frobenius(old).clamp_min(1e-30)
            if not values:
                return
            names = list(values)
            numbers = torch.stack([values[k].reshape(()) for k in names]).cpu().tolist()
        self.last_update_ratios = {f"{PREFIX}/{k}": v for k, v in zip(names, numbers)}
        self._log(trainer, self.last_update_ratios, step)

    # ------------------------------------------------------------ helpers

    def _stuck_after(self, pl_module: L.LightningModule) -> int:
        if self.stuck_after is not None:
            return self.stuck_after
        hparams = getattr(pl_module, "hparams", {}) or {}
        try:
            return int(hparams.get("warmup_steps") or 0)
        except (TypeError, ValueError):
            return 0

    def _measure_unigram_loss(self, trainer: L.Trainer, pl_module: L.LightningModule
                              ) -> tuple[Optional[float], Optional[str]]:
        model = _andrea_of(pl_module)
        vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
        stream = _train_token_stream(trainer.datamodule) if trainer.datamodule is not None else None
        if stream is not None and vocab_size:
            try:
                return sample_unigram_loss(stream, vocab_size, self.unigram_sample_tokens), "train_tokens"
            except Exception as exc:
                warnings.warn(f"StabilityMonitor: could not measure the unigram loss from the training tokens "
                              f"({type(exc).__name__}: {exc}); using ln(vocab_size)")
        if vocab_size:
            return math.log(vocab_size), "ln_vocab"
        return None, None

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


def param_groups(model: nn.Module) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """The model's parameters by group: ``block_NN``, ``embeddings`` (token and position; the token matrix
    is tied to the head) and ``head`` (everything else: the final norm, an untied head)."""
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {}
    for name, param in model.named_parameters():
        if name.startswith("blocks."):
            key = block_tag(int(name.split(".")[1]))
        elif name.startswith(("token_embed.", "position_embed.")):
            key = "embeddings"
        else:
            key = "head"
        groups.setdefault(key, []).append((name, param))
    return groups


def measure_probe(model: nn.Module, x: torch.Tensor, y: Optional[torch.Tensor] = None,
                  autocast: Any = None) -> dict[str, float]:
    """Every probe statistic of ``model`` (an Andrea) on the batch ``x`` (targets ``y``; None: ``x`` shifted),
    as ``{"grad_norm/block_00": ..., "stream_rms/block_00": ..., ...}`` (names without the prefix).

    Runs in eval mode (restored after), under an isolated RNG, and differentiates with
    ``torch.autograd.grad``: parameters' ``.grad`` are never touched. ``autocast`` is an optional context
    manager for the forward pass (Lightning's precision plugin's ``forward_context()``).
    """
    if y is None:
        x, y = x[:, :-1], x[:, 1:]
    groups = param_groups(model)
    named = [(key, name, p) for key, members in groups.items() for name, p in members if p.requires_grad]
    with ExitStack() as stack:
        stack.enter_context(isolate_rng())
        stack.enter_context(_eval_mode(model))
        stack.enter_context(torch.enable_grad())
        hooks = stack.enter_context(_ProbeHooks(model))
        if autocast is not None:
            stack.enter_context(autocast)
        logits, loss = model(x, y)
        embedded = hooks.embedded if hooks.embedded is not None and hooks.embedded.requires_grad else None
        inputs = [p for _, _, p in named] + ([embedded] if embedded is not None else [])
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    with torch.no_grad():
        values = dict(hooks.values)
        logits = logits.detach().float()
        values["logit_max"] = logits.amax()
        values["log_z"] = torch.logsumexp(logits, dim=-1).mean()
        values["probe_loss"] = loss.detach().float()
        by_group: dict[str, list[torch.Tensor]] = {}
        grad_of: dict[str, torch.Tensor] = {}
        for (key, name, _), g in zip(named, grads):
            if g is not None:
                by_group.setdefault(key, []).append(g)
                grad_of[name] = g
        for key, gs in by_group.items():
            if key.startswith("block_"):
                values[f"grad_norm/{key}"] = _frobenius(gs)
        grad_embedded = grads[len(named)] if embedded is not None else None
        values.update(_embedding_and_head_grad_norms(model, x, grad_of, by_group, grad_embedded))
        names = sorted(values)
        numbers = torch.stack([values[k].reshape(()).float().to(logits.device) for k in names]).cpu().tolist()
    return dict(zip(names, numbers))


def _embedding_and_head_grad_norms(model: nn.Module, idx: torch.Tensor, grad_of: dict[str, torch.Tensor],
                                   by_group: dict[str, list[torch.Tensor]], grad_embedded: Optional[torch.Tensor]
                                   ) -> dict[str, torch.Tensor]:
    """Gradient norm of the embeddings *through the trunk* (the bottom of the Xiong et al. depth profile),
    and of the output head.

    The token embedding is tied to the output head, so its parameter gradient is mostly the head's. Its
    input share is the gradient at the embedding output (the bottom of the residual stream) scattered
    back onto the rows of the tokens used; with the position embedding's gradient that is
    ``grad_norm/embeddings``. ``grad_norm/head`` is the rest of the tied matrix's gradient plus the final
    norm's (or an untied head's) parameters.
    """
    out: dict[str, torch.Tensor] = {}
    if grad_embedded is None:  # no hook point: report the raw parameter gradients
        for key in ("embeddings", "head"):
            if by_group.get(key):
                out[f"grad_norm/{key}"] = _frobenius(by_group[key])
        return out
    g = grad_embedded.float()
    token_in = torch.zeros(model.token_embed.weight.shape, device=g.device, dtype=torch.float32)
    token_in.index_add_(0, idx.reshape(-1), g.reshape(-1, g.shape[-1]))
    out["grad_norm/embeddings"] = _frobenius([token_in, g.sum(dim=0)])
    head = list(by_group.get("head", []))
    token_total = grad_of.get("token_embed.weight")
    lm_head = getattr(model, "lm_head", None)
    if token_total is not None and lm_head is not None and lm_head.weight is model.token_embed.weight:
        head.append(token_total.float() - token_in)
    if head:
        out["grad_norm/head"] = _frobenius(head)
    return out


def _andrea_of(pl_module: nn.Module) -> Optional[nn.Module]:
    """The ANDREA-shaped model inside a LightningModule (``.model`` with ``.blocks``), if any."""
    model = getattr(pl_module, "model", pl_module)
    return model if isinstance(getattr(model, "blocks", None), nn.ModuleList) else None
