"""AndreaLM: the LightningModule that trains ANDREA with next-token cross-entropy.

Its ``__init__`` signature is the ``model:`` section of an experiment YAML: LightningCLI turns the
typed parameters (and the nested :class:`AndreaConfig`) into config keys and ``--help``.
"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import asdict
from typing import ClassVar, Literal, Optional

import numpy as np

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from andrea_lab import tags
from andrea_lab.config import AndreaConfig, ConfigError
from andrea_lab.plugins.contracts import PLUGIN_KINDS
from andrea_lab.errors import DivergenceError
from andrea_lab.initial_weights import InitialWeights
from andrea_lab.model import Andrea
from andrea_lab.nonfinite import NonFiniteTally, global_grad_norm, takes_found_inf
from andrea_lab.plugins.registry import same_plugin
from andrea_lab.z_loss import cross_entropy_and_z_loss


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup from 0 to 1 over ``warmup_steps``, then cosine decay to
    ``min_lr_ratio`` at ``decay_steps``, flat afterwards. ``warmup_steps == 0`` starts at the peak."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _numpy_state_to_torch(state: tuple) -> tuple:
    """numpy's RNG state with its key array as a tensor, so the checkpoint loads with weights_only=True."""
    name, keys, position, has_gauss, cached_gaussian = state
    return name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian


def _numpy_state_from_torch(state: tuple) -> tuple:
    name, keys, position, has_gauss, cached_gaussian = state
    return name, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian


def fused_adamw(param_groups: list[dict], fused: bool = True, **hparams) -> torch.optim.AdamW:
    """AdamW with the fused kernel wherever torch has one (CUDA, CPU, ...), else (or with
    ``fused=False``) torch's default implementation.

    Fused is one kernel per step instead of several per parameter group (GPU) and no slower on the
    CPU (docs/performance.md); it also takes the device-side skip flag ``found_inf`` that keeps the
    non-finite check free of host syncs (andrea_lab/nonfinite.py)."""
    if not fused:
        return torch.optim.AdamW(param_groups, **hparams)
    try:
        return torch.optim.AdamW(param_groups, fused=True, **hparams)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.AdamW(param_groups, **hparams)


def adamw_with_schedule(model: torch.nn.Module, lr: float, betas: tuple[float, float], eps: float,
                        weight_decay: float, warmup_steps: int, decay_steps: int, min_lr_ratio: float,
                        fused: bool = True) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AndreaLM's optimizer, for any model: AdamW with weight decay on the matrices only (``dim >= 2``,
    unless a parameter says otherwise in ``_andrea_decay``), fused where torch has the kernel, and the
    per-step warmup + cosine schedule (:func:`warmup_cosine`). benchmarks/throughput trains HF GPT-2 with it."""
    decays = [(p, getattr(p, "_andrea_decay", p.dim() >= 2)) for p in model.parameters()]
    optimizer = fused_adamw([{"params": [p for p, d in decays if d], "weight_decay": weight_decay},
                             {"params": [p for p, d in decays if not d], "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, warmup_steps, decay_steps, min_lr_ratio))
    return optimizer, scheduler


def _same_field(name: str, saved, current) -> bool:
    """Equal values; for a plugin, names that select the same entry point (``pre``, ``andrea-lab:pre``)."""
    if saved == current:
        return True
    return name in PLUGIN_KINDS and isinstance(saved, str) and isinstance(current, str) and same_plugin(
        name, saved, current)


class AndreaLM(L.LightningModule):
    """Train ANDREA: AdamW (decay on matrices only), linear warmup then cosine decay.

    Args:
        config: The architecture (defaults: ANDREA-120M).
        lr: Peak learning rate.
        warmup_steps: Linear warmup length in optimizer steps (0 = start at the peak).
        decay_steps: Step at which the cosine reaches ``min_lr_ratio·lr``; None = the trainer's total steps.
        min_lr_ratio: Final learning rate as a fraction of ``lr``.
        weight_decay: AdamW weight decay, applied to weight matrices and embeddings only.
        betas: AdamW betas.
        eps: AdamW epsilon.
        on_nonfinite: What to do when the loss or gradient norm is NaN/inf: ``stop`` (raise
            DivergenceError; the last good checkpoint is kept) or ``skip`` (drop that step's update).
            Such an update is never applied; the host checks every ``trainer.log_every_n_steps``
            steps and before each checkpoint (no per-step sync, see ``andrea_lab/nonfinite.py``), so
            ``stop`` ends the run up to that many steps after the first non-finite step.
        max_skipped_steps: With ``skip``, stop after this many skipped steps in one run.
        compile: Compile the model with ``torch.compile`` (in place, so checkpoint keys do not change).
        z_loss: Coefficient of the auxiliary z-loss ``z_loss · mean(log² Z)`` added to the optimised loss
            (PaLM: 1e-4; 0 = off), logged as ``train/z_loss``; ``train/loss`` stays the cross-entropy.
        init_from: A checkpoint (from ``andrea fit`` or ``andrea import``) whose weights this fit starts
            from: weights only; optimizer, step and schedule start fresh (to resume a run, use
            ``--ckpt_path``). Its architecture must equal ``config`` and its tokenizer the data's.
    """

    #: Use the fused AdamW kernel where torch has one (a class attribute so benchmarks and tests can
    #: measure the alternative; not a config key, since it changes speed, not results).
    use_fused_adamw: ClassVar[bool] = True

    def __init__(
        self,
        config: AndreaConfig = AndreaConfig(),
        lr: float = 6e-4,
        warmup_steps: int = 100,
        decay_steps: Optional[int] = None,
        min_lr_ratio: float = 0.1,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        on_nonfinite: Literal["stop", "skip"] = "stop",
        max_skipped_steps: int = 10,
        compile: bool = False,
        z_loss: float = 0.0,
        init_from: Optional[str] = None,
    ):
        super().__init__()
        if isinstance(config, dict):  # as stored in a checkpoint's hyperparameters
            config = AndreaConfig(**config)
        self._check_training_args(lr, warmup_steps, decay_steps, min_lr_ratio, weight_decay, betas, eps)
        if not (isinstance(z_loss, (int, float)) and math.isfinite(z_loss) and z_loss >= 0):
            raise ConfigError(f"z_loss must be a finite number >= 0 (0 = off; PaLM uses 1e-4), got {z_loss!r}")
        if on_nonfinite not in ("stop", "skip"):
            raise ConfigError(f"on_nonfinite must be 'stop' or 'skip', got {on_nonfinite!r}")
        if max_skipped_steps < 0:
            raise ConfigError(f"max_skipped_steps must be >= 0, got {max_skipped_steps!r}")
        # The config is saved as a plain dict: checkpoints and hparams.yaml stay readable without
        # unpickling andrea-lab classes, and load_from_checkpoint rebuilds it above.
        self.save_hyperparameters({"config": asdict(config), "lr": lr, "warmup_steps": warmup_steps,
                                   "decay_steps": decay_steps, "min_lr_ratio": min_lr_ratio,
                                   "weight_decay": weight_decay, "betas": tuple(betas), "eps": eps,
                                   "on_nonfinite": on_nonfinite, "max_skipped_steps": max_skipped_steps,
                                   "compile": compile, "z_loss": z_loss})
        self.config = config
        self.model = Andrea(config)
        # Not a saved hyperparameter: a checkpoint of this run is complete without the file it started from
        # (config.yaml records it), and loading that checkpoint must not read it again.
        self._initial_weights = self._load_initial_weights(init_from) if init_from else None
        # Which parameters get weight decay is decided here, on the original shapes: under FSDP,
        # configure_optimizers sees flattened 1-D shards, and p.dim() would turn decay off for all.
        for parameter in self.model.parameters():
            parameter._andrea_decay = parameter.dim() >= 2
        self.val_loss = MeanMetric()
        self.val_perplexity = Perplexity()
        self.skipped_steps = 0
        self._nonfinite = NonFiniteTally()
        self._last_train_loss: torch.Tensor | None = None
        #: This optimizer step's global gradient norm before clipping (a device tensor), or None on a
        #: micro-batch that does not step; the stability monitor reads it instead of recomputing it.
        self.last_grad_norm: torch.Tensor | None = None

    @staticmethod
    def _check_training_args(lr, warmup_steps, decay_steps, min_lr_ratio, weight_decay, betas, eps) -> None:
        checks = [
            (lr > 0 and math.isfinite(lr), f"lr must be a finite number > 0, got {lr!r}"),
            (warmup_steps >= 0, f"warmup_steps must be >= 0, got {warmup_steps!r}"),
            (decay_steps is None or decay_steps > 0, f"decay_steps must be > 0 or null, got {decay_steps!r}"),
            (0.0 <= min_lr_ratio <= 1.0, f"min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}"),
            (weight_decay >= 0, f"weight_decay must be >= 0, got {weight_decay!r}"),
            (len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas), f"betas must be two numbers in [0, 1), got {betas!r}"),
            (eps > 0, f"eps must be > 0, got {eps!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    def _load_initial_weights(self, path: str) -> InitialWeights:
        """Load ``init_from``'s weights into the model, after checking its architecture is ``config``'s."""
        initial = InitialWeights(path)
        differences = self._architecture_differences(initial.saved_config)
        if differences:
            raise initial.architecture_error(differences)
        try:
            self.load_state_dict(initial.state_dict)
        except RuntimeError as exc:  # no saved config to compare (a foreign state dict): the shapes speak
            raise initial.architecture_error([str(exc).splitlines()[-1].strip()]) from None
        initial.state_dict = {}  # the weights are in the model now; keep only what setup checks
        return initial

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if self._initial_weights is None or datamodule is None:
            return
        try:
            tokenizer = datamodule.tokenizer
        except (AttributeError, RuntimeError):  # another data module, or one that knows no tokenizer yet
            return
        self._initial_weights.check_tokenizer(tokenizer, str(getattr(datamodule, "tokenizer_spec", "")))

    def configure_model(self) -> None:
        # nn.Module.compile compiles in place: parameter names, and so checkpoints, stay the same
        # with and without compilation.
        if self.hparams.compile and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(idx, targets)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.last_grad_norm = None
        if self.hparams.z_loss:  # the cross-entropy and the z-loss from one logsumexp (andrea_lab/z_loss.py)
            logits, _ = self.model(x)
            loss, penalty = cross_entropy_and_z_loss(logits, y, self.hparams.z_loss)
            objective = loss + penalty
        else:
            _, loss = self.model(x, y)
            objective = loss
        self.log(tags.TRAIN_LOSS, loss, prog_bar=True)  # the cross-entropy, with or without the z-loss
        self._last_train_loss = objective.detach()
        if self._logger_writes_now():
            self.log(tags.TRAIN_LR, self.lr_schedulers().get_last_lr()[0])
            self.log(tags.TRAIN_TOKENS, float((self.global_step + 1) * x.numel() * self.trainer.world_size))
            if self.hparams.z_loss:
                self.log(tags.TRAIN_Z_LOSS, penalty)
        return objective

    def _logger_writes_now(self) -> bool:
        """Whether the logger keeps this step's values. Each ``self.log`` costs host time (~0.9 ms on
        a 2-core CPU, docs/performance.md) and the logger drops all but every ``log_every_n_steps``-th
        value, so the per-step scalars other than the loss are only logged when they are kept."""
        return (self.global_step + 1) % max(1, self.trainer.log_every_n_steps) == 0

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Called after backward and before clipping: this is the raw gradient norm.
        norm = global_grad_norm(self.parameters())
        if norm is None:
            return
        self.last_grad_norm = norm.detach()
        if self._logger_writes_now():
            self.log(tags.TRAIN_GRAD_NORM, norm)
        if self._grad_scaler() is not None:
            return  # fp16: GradScaler skips overflowing steps itself; they are routine, not divergence
        loss = self._last_train_loss if self._last_train_loss is not None else norm
        bad = ~(torch.isfinite(norm) & torch.isfinite(loss))
        self._nonfinite.record(bad, self.global_step, loss, norm)
        if takes_found_inf(optimizer):
            optimizer.found_inf = bad.float()  # the fused step skips itself on the device: no sync
        elif bool(bad):  # any other optimizer: read now, while the update can still be dropped
            self._check_nonfinite(optimizer)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        """Clip with the fused AdamW under bf16-mixed, which Lightning's mixed-precision plugin
        refuses outright ("performs unscaling of gradients internally") although bf16 scales nothing.

        Without a ``GradScaler`` the gradients are already true gradients, so the clip is applied here
        with the norm :meth:`on_before_optimizer_step` measured (no second pass over the gradients);
        a non-finite norm leaves them to the non-finite policy, whose skip happens on the device.
        fp16 (a scaler) never gets here with a fused optimizer: :meth:`configure_optimizers` picks the
        unfused one when it must clip, so Lightning unscales first."""
        if gradient_clip_val and takes_found_inf(optimizer) and self._grad_scaler() is None:
            grads = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(grads, float(gradient_clip_val), foreach=True)
            elif self.last_grad_norm is not None:
                torch.nn.utils.clip_grads_with_norm_(grads, float(gradient_clip_val), self.last_grad_norm,
                                                     foreach=True)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.global_step % max(1, self.trainer.log_every_n_steps) == 0:
            self._check_nonfinite()

    def on_train_end(self) -> None:
        self._check_nonfinite()

    def _grad_scaler(self):
        return getattr(self.trainer.precision_plugin, "scaler", None)

    def _check_nonfinite(self, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """Read the device-side tally of non-finite steps and apply ``on_nonfinite`` to them.

        With a fused optimizer those steps' updates were already skipped on the device; otherwise
        ``optimizer`` is given and this step's update is dropped here by clearing the gradients."""
        found = self._nonfinite.collect()
        if found is None:
            return
        where = (f"step {found.first_step}" if found.count == 1
                 else f"{found.count} steps from step {found.first_step}")
        first = f"loss {found.loss}, gradient norm {found.grad_norm}"
        if self.hparams.on_nonfinite == "skip" and self.skipped_steps + found.count <= self.hparams.max_skipped_steps:
            self.skipped_steps += found.count
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)  # AdamW leaves parameters without a grad untouched
            # The logger directly: Lightning refuses self.log in on_train_end and the checkpoint hooks.
            if self.logger is not None:
                self.logger.log_metrics({tags.TRAIN_SKIPPED_STEPS: float(self.skipped_steps)}, step=self.global_step)
            warnings.warn(f"non-finite loss or gradient norm at {where} (first: {first}); update skipped "
                          f"({self.skipped_steps} of at most {self.hparams.max_skipped_steps})", RuntimeWarning)
            return
        checkpoint = getattr(self.trainer.checkpoint_callback, "last_model_path", "") or "none written yet"
        reason = (f"more than max_skipped_steps={self.hparams.max_skipped_steps} non-finite steps"
                  if self.hparams.on_nonfinite == "skip" else "on_nonfinite=stop")
        raise DivergenceError(f"training diverged at step {found.first_step}: {first} ({reason}). Non-finite "
                              f"updates are never applied; the last good checkpoint is kept: {checkpoint}. "
                              f"Try a lower model.lr, more model.warmup_steps, or trainer.gradient_clip_val.")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # A pending non-finite step is settled first: "stop" must raise before a checkpoint is written.
        if self._trainer is not None:
            self._check_nonfinite()
        # Dropout masks and any sampling depend on the RNGs: save them so a resumed run continues
        # exactly as an uninterrupted one would.
        checkpoint["rng_states"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": _numpy_state_to_torch(np.random.get_state()),
            "python": random.getstate(),
        }
        checkpoint["skipped_steps"] = self.skipped_steps

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._check_same_architecture(checkpoint.get("hyper_parameters", {}).get("config"))
        states = checkpoint.get("rng_states")
        if states:
            torch.set_rng_state(states["torch"])
            if states["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(states["cuda"])
            np.random.set_state(_numpy_state_from_torch(states["numpy"]))
            random.setstate(states["python"])
        self.skipped_steps = checkpoint.get("skipped_steps", 0)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        x, y = batch
        logits, loss = self.model(x, y)
        self.val_loss.update(loss, weight=y.numel())
        self.val_perplexity.update(logits.float(), y)
        self.log(tags.STAGE_LOSS[stage], self.val_loss, prog_bar=True)
        self.log(tags.STAGE_PERPLEXITY[stage], self.val_perplexity)

    def on_validation_epoch_end(self) -> None:
        # Lightning discards what is logged during the sanity check. Its loss is the loss at
        # initialisation (about ln(vocab_size)), the natural first point of every curve: log it at step 0.
        if self.trainer.sanity_checking and self.global_step == 0 and self.logger is not None:
            self.logger.log_metrics({tags.VAL_LOSS: float(self.val_loss.compute()),
                                     tags.VAL_PERPLEXITY: float(self.val_perplexity.compute())}, step=0)

    #: Fields that decide the shapes and meaning of the weights; the others (kernel backend,
    #: dropout, ...) may change between a checkpoint and the run that resumes from it.
    ARCHITECTURE_FIELDS = ("vocab_size", "block_size", "d_model", "n_layer", "n_head", "mlp_ratio",
                           "norm_placement", "activation", "bias", "norm", "qk_norm")

    def _architecture_differences(self, saved: dict | None) -> list[str]:
        """``field: checkpoint X, config Y`` for each architecture field where ``saved`` differs (none if no config).
        A field the checkpoint lacks is at its default: it was written before the field existed."""
        if not saved:
            return []
        current, defaults = asdict(self.config), asdict(AndreaConfig())
        saved = {**defaults, **saved}
        return [f"{name}: checkpoint {saved.get(name)!r}, config {current[name]!r}"
                for name in self.ARCHITECTURE_FIELDS if not _same_field(name, saved.get(name), current[name])]

    def _check_same_architecture(self, saved: dict | None) -> None:
        """Refuse a checkpoint of another architecture with the differing fields, not a shape traceback."""
        differences = self._architecture_differences(saved)
        if differences:
            raise ConfigError("the checkpoint was trained with a different architecture than model.config ("
                              + "; ".join(differences) + "); use the run's own config.yaml with this "
                              "checkpoint, or start a new fit without ckpt_path")

    def configure_optimizers(self):
        hp = self.hparams
        decay_steps = hp.decay_steps or max(1, int(self.trainer.estimated_stepping_batches))
        # fp16 with clipping: the scaler must unscale before the clip, which a fused AdamW does not allow.
        clips_under_scaler = (self._trainer is not None and self._grad_scaler() is not None
                              and bool(self.trainer.gradient_clip_val))
        optimizer, scheduler = adamw_with_schedule(self.model, hp.lr, hp.betas, hp.eps, hp.weight_decay,
                                                   hp.warmup_steps, decay_steps, hp.min_lr_ratio,
                                                   fused=self.use_fused_adamw and not clips_under_scaler)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
