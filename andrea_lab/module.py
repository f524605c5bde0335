"""AndreaLM: the LightningModule that trains ANDREA with next-token cross-entropy.

Its ``__init__`` signature is the ``model:`` section of an experiment YAML: LightningCLI turns the
typed parameters (and the nested :class:`AndreaConfig`) into config keys and ``--help``. What it
delegates: the optimizer and schedule (:mod:`andrea_lab.training.optim`), the training arguments' checks
(:mod:`andrea_lab.training.args`), the non-finite policy (:mod:`andrea_lab.training.nonfinite`), the RNG states
of a checkpoint (:mod:`andrea_lab.training.rng_state`) and ``init_from`` (:mod:`andrea_lab.training.initial_weights`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar, Literal, Optional

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from andrea_lab.runs import tags
from andrea_lab.runs.checkpoint_io import stored_hyperparameters, stored_model_config
from andrea_lab.config import AndreaConfig
from andrea_lab.errors import UsageError
from andrea_lab.training.initial_weights import InitialWeights
from andrea_lab.model import Andrea
from andrea_lab.training.nonfinite import NonFiniteGuard, global_grad_norm, takes_found_inf
from andrea_lab.training.optim import adamw_with_schedule, clip_fused, tag_weight_decay
from andrea_lab.training.rng_state import capture_rng_states, restore_rng_states
from andrea_lab.training.args import TrainingArgs
from andrea_lab.stability.z_loss import cross_entropy_and_z_loss


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
            steps and before each checkpoint (no per-step sync, see ``andrea_lab/training/nonfinite.py``), so
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

    def __init__(self, config: AndreaConfig = AndreaConfig(), lr: float = 6e-4, warmup_steps: int = 100,
                 decay_steps: Optional[int] = None, min_lr_ratio: float = 0.1, weight_decay: float = 0.1,
                 betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 on_nonfinite: Literal["stop", "skip"] = "stop", max_skipped_steps: int = 10,
                 compile: bool = False, z_loss: float = 0.0, init_from: Optional[str] = None):
        super().__init__()
        self.config = config if isinstance(config, AndreaConfig) else AndreaConfig(**config)  # a stored dict
        self.args = TrainingArgs.from_arguments(locals())  # every other argument but init_from, checked
        # Saved as plain values (checkpoints load weights-only, hparams.yaml stays plain YAML), the same keys
        # as ever; not init_from: a checkpoint of this run is complete without the file it started from.
        # A dict, not the bare call, which under LightningCLI would save the CLI's dump of its arguments.
        self.save_hyperparameters({"config": asdict(self.config), **asdict(self.args)})
        self.model = Andrea(self.config)
        tag_weight_decay(self.model)
        self._initial_weights = InitialWeights.load_into(self, init_from) if init_from else None
        self.val_loss, self.val_perplexity = MeanMetric(), Perplexity()
        #: The one owner of the non-finite policy and tally; the stability monitor reads it (nonfinite.guard_of).
        self.nonfinite = NonFiniteGuard(self.args.on_nonfinite, self.args.max_skipped_steps)
        self._last_train_loss: torch.Tensor | None = None

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any], path: str) -> "AndreaLM":
        """The module a loaded checkpoint (``checkpoint_io.load_checkpoint``) holds, weights included."""
        if stored_model_config(checkpoint) is None:
            raise UsageError(f"{path} is not an andrea checkpoint (no model config in its hyper_parameters)")
        module = cls(**stored_hyperparameters(checkpoint))
        module.load_state_dict(checkpoint["state_dict"])
        return module

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if self._initial_weights is not None and datamodule is not None:
            self._initial_weights.check_data(datamodule)

    def configure_model(self) -> None:
        # nn.Module.compile compiles in place: parameter names, and so checkpoints, stay the same.
        if self.args.compile and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(idx, targets)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.nonfinite.last_grad_norm = None
        if self.args.z_loss:  # the cross-entropy and the z-loss from one logsumexp (andrea_lab/stability/z_loss.py)
            logits, _ = self.model(x)
            loss, penalty = cross_entropy_and_z_loss(logits, y, self.args.z_loss)
            objective = loss + penalty
        else:
            _, loss = self.model(x, y)
            objective = loss
        self.log(tags.TRAIN_LOSS, loss, prog_bar=True)  # the cross-entropy, with or without the z-loss
        self._last_train_loss = objective.detach()
        if self._logger_writes_now():
            self.log(tags.TRAIN_LR, self.lr_schedulers().get_last_lr()[0])
            self.log(tags.TRAIN_TOKENS, float((self.global_step + 1) * x.numel() * self.trainer.world_size))
            if self.args.z_loss:
                self.log(tags.TRAIN_Z_LOSS, penalty)
        return objective

    def _logger_writes_now(self) -> bool:
        """Whether the logger keeps this step's values: each ``self.log`` costs host time (~0.9 ms on 2
        CPU cores, docs/performance.md), so the scalars other than the loss are logged only when kept."""
        return (self.global_step + 1) % max(1, self.trainer.log_every_n_steps) == 0

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        norm = global_grad_norm(self.parameters())  # after backward, before clipping: the raw norm
        if norm is None:
            return
        self.nonfinite.last_grad_norm = norm.detach()
        if self._logger_writes_now():
            self.log(tags.TRAIN_GRAD_NORM, norm)
        if self._grad_scaler() is not None:
            return  # fp16: GradScaler skips overflowing steps itself; they are routine, not divergence
        loss = self._last_train_loss if self._last_train_loss is not None else norm
        if self.nonfinite.observe(optimizer, self.global_step, loss, norm):
            self._settle_nonfinite(optimizer)  # an optimizer without found_inf: drop the update now

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        """Without a ``GradScaler``, a fused AdamW clips with the norm already measured (optim.clip_fused),
        where Lightning's mixed-precision plugin would refuse it under bf16-mixed although bf16 scales nothing."""
        if not (gradient_clip_val and takes_found_inf(optimizer) and self._grad_scaler() is None):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        clip_fused(optimizer, float(gradient_clip_val), gradient_clip_algorithm, self.nonfinite.last_grad_norm)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.global_step % max(1, self.trainer.log_every_n_steps) == 0:
            self._settle_nonfinite()

    def on_train_end(self) -> None:
        self._settle_nonfinite()

    def _grad_scaler(self):
        return getattr(self.trainer.precision_plugin, "scaler", None)

    def _settle_nonfinite(self, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """Apply ``on_nonfinite`` to the steps found non-finite since the last read (NonFiniteGuard.settle);
        without the fused skip, ``optimizer``'s pending update is dropped by clearing its gradients."""
        checkpoint = getattr(self.trainer.checkpoint_callback, "last_model_path", "") or "none written yet"
        if not self.nonfinite.settle(checkpoint):
            return
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)  # AdamW leaves parameters without a grad untouched
        if self.logger is not None:  # directly: Lightning refuses self.log in on_train_end and checkpoint hooks
            self.logger.log_metrics({tags.TRAIN_SKIPPED_STEPS: float(self.nonfinite.skipped_steps)},
                                    step=self.global_step)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self._trainer is not None:  # "stop" must raise before a checkpoint of a diverged run is written
            self._settle_nonfinite()
        checkpoint["rng_states"] = capture_rng_states()  # a resumed run continues as an uninterrupted one
        checkpoint["skipped_steps"] = self.nonfinite.skipped_steps

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.config.check_same_architecture(stored_model_config(checkpoint))
        if checkpoint.get("rng_states"):
            restore_rng_states(checkpoint["rng_states"])
        self.nonfinite.skipped_steps = checkpoint.get("skipped_steps", 0)

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
        # Lightning discards what the sanity check logs. Its loss is the loss at initialisation (about
        # ln(vocab_size)), the natural first point of every curve: log it at step 0.
        if self.trainer.sanity_checking and self.global_step == 0 and self.logger is not None:
            self.logger.log_metrics({tags.VAL_LOSS: float(self.val_loss.compute()),
                                     tags.VAL_PERPLEXITY: float(self.val_perplexity.compute())}, step=0)

    def configure_optimizers(self):
        args = self.args
        decay_steps = args.decay_steps or max(1, int(self.trainer.estimated_stepping_batches))
        # fp16 with clipping: the scaler must unscale before the clip, which a fused AdamW does not allow.
        clips_under_scaler = (self._trainer is not None and self._grad_scaler() is not None
                              and bool(self.trainer.gradient_clip_val))
        optimizer, scheduler = adamw_with_schedule(self.model, args.lr, args.betas, args.eps, args.weight_decay,
                                                   args.warmup_steps, decay_steps, args.min_lr_ratio,
                                                   fused=self.use_fused_adamw and not clips_under_scaler)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
