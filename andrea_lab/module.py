"""AndreaLM: the LightningModule that trains ANDREA with next-token cross-entropy.

Its ``__init__`` signature is the ``model:`` section of an experiment YAML: LightningCLI turns the
typed parameters (and the nested :class:`AndreaConfig`) into config keys and ``--help``.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Optional, Union

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from andrea_lab.config import AndreaConfig, ConfigError
from andrea_lab.model import Andrea


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup from 0 to 1 over ``warmup_steps``, then cosine decay to
    ``min_lr_ratio`` at ``decay_steps``, flat afterwards. ``warmup_steps == 0`` starts at the peak."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


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
    """

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
    ):
        super().__init__()
        if isinstance(config, dict):  # as stored in a checkpoint's hyperparameters
            config = AndreaConfig(**config)
        self._check_training_args(lr, warmup_steps, decay_steps, min_lr_ratio, weight_decay, betas, eps)
        # The config is saved as a plain dict: checkpoints and hparams.yaml stay readable without
        # unpickling andrea-lab classes, and load_from_checkpoint rebuilds it above.
        self.save_hyperparameters({"config": asdict(config), "lr": lr, "warmup_steps": warmup_steps,
                                   "decay_steps": decay_steps, "min_lr_ratio": min_lr_ratio,
                                   "weight_decay": weight_decay, "betas": tuple(betas), "eps": eps})
        self.config = config
        self.model = Andrea(config)
        self.val_loss = MeanMetric()
        self.val_perplexity = Perplexity()

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

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(idx, targets)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        _, loss = self.model(x, y)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0])
        self.log("train/tokens", float((self.global_step + 1) * x.numel() * self.trainer.world_size))
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Called after backward and before clipping: this is the raw gradient norm.
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if grads:
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            self.log("train/grad_norm", norm)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        x, y = batch
        logits, loss = self.model(x, y)
        self.val_loss.update(loss, weight=y.numel())
        self.val_perplexity.update(logits.float(), y)
        self.log(f"{stage}/loss", self.val_loss, prog_bar=True)
        self.log(f"{stage}/perplexity", self.val_perplexity)

    def on_validation_epoch_end(self) -> None:
        # Lightning discards what is logged during the sanity check. Its loss is the loss at
        # initialisation (about ln(vocab_size)), the natural first point of every curve: log it at step 0.
        if self.trainer.sanity_checking and self.global_step == 0 and self.logger is not None:
            self.logger.log_metrics({"val/loss": float(self.val_loss.compute()),
                                     "val/perplexity": float(self.val_perplexity.compute())}, step=0)

    def configure_optimizers(self):
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr, betas=self.hparams.betas, eps=self.hparams.eps,
            fused=self.device.type == "cuda" or None,
        )
        decay_steps = self.hparams.decay_steps or max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: warmup_cosine(step, self.hparams.warmup_steps, decay_steps, self.hparams.min_lr_ratio),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
