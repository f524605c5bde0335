"""Helpers for the stability tests: wirings with known properties, selectable by import path
(``stability_helpers:BareNoResidual``), and a small in-process fit on the real data module."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from andrea_testing import tiny_trainer
from torch.utils.data import DataLoader

from andrea_lab.data import AndreaDataModule
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.builtin.placements import PreNorm
from andrea_lab.model.config import preset
from andrea_lab.model.contracts import NormPlacement


class BareNoResidual(NormPlacement):
    """``f(x)``: no residual add and no norm. Nothing carries the identity, so at initialisation (every
    sublayer a small-gain map) the gradient reaching the embeddings shrinks by orders of magnitude."""

    final_norm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sublayer(x)


class NormNoResidual(PreNorm):
    """``LN(f(x))``: post-norm without the add (PreNorm's one LayerNorm, used after the sublayer). LayerNorm's
    scale invariance re-amplifies the signal in every block, so at initialisation the embedding gradient is
    *not* small (measured; see docs/stability.md)."""

    final_norm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.sublayer(x))


class NoisyPreNorm(PreNorm):
    """Pre-norm that draws from the global RNG on every call, in eval mode too (adds 0·noise): a
    probe that did not isolate the RNG would shift every later random draw of the run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.0 * torch.randn_like(x)


class GlobalRNGValLoader(AndreaDataModule):
    """AndreaDataModule whose validation loader has no generator of its own, so that creating an iterator
    over it draws from the global torch RNG (as a plain ``DataLoader`` does)."""

    def val_dataloader(self) -> DataLoader:
        loader = super().val_dataloader()
        return DataLoader(loader.dataset, batch_size=self.batch_size, shuffle=False)


class LossRecorder(L.Callback):
    """Every training batch's loss, as a Python float (for comparing two runs exactly)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def micro_module(lr: float = 3e-3, warmup_steps: int = 2, **config: Any) -> AndreaLM:
    return AndreaLM(config=preset("andrea-micro", **{"block_size": 32, **config}), lr=lr, warmup_steps=warmup_steps)


def micro_datamodule(
    corpus: Path, block_size: int = 32, batch_size: int = 4, cls: type = AndreaDataModule
) -> AndreaDataModule:
    return cls(
        corpus=str(corpus),
        tokenizer="byte",
        vocab_size=257,
        block_size=block_size,
        batch_size=batch_size,
        max_val_batches=2,
    )


def fit(
    tmp_path: Path,
    corpus: Path,
    callbacks: list[L.Callback],
    max_steps: int = 6,
    seed: int = 7,
    module: Optional[L.LightningModule] = None,
    logger: bool = True,
    val_check_interval: Optional[int] = None,
    name: str = "run",
    datamodule_cls: type = AndreaDataModule,
    **trainer_kwargs: Any,
) -> L.Trainer:
    """A seeded in-process fit of the micro model on ``corpus`` (byte tokenizer, 32-token windows)."""
    L.seed_everything(seed, verbose=False)
    module = module if module is not None else micro_module()
    datamodule = micro_datamodule(
        corpus, block_size=module.config.block_size if hasattr(module, "config") else 32, cls=datamodule_cls
    )
    trainer = tiny_trainer(
        tmp_path if logger else None,
        name=name,
        max_steps=max_steps,
        callbacks=callbacks,
        num_sanity_val_steps=trainer_kwargs.pop("num_sanity_val_steps", 1),
        limit_val_batches=trainer_kwargs.pop("limit_val_batches", 1),
        val_check_interval=val_check_interval or max_steps,
        check_val_every_n_epoch=None,
        log_every_n_steps=1,
        gradient_clip_val=1.0,
        **trainer_kwargs,
    )
    trainer.fit(module, datamodule=datamodule)
    return trainer
