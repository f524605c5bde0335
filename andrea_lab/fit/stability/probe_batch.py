"""The StabilityMonitor's fixed probe batch: the first validation batch (or the first training batch), taken
once, on the module's device, without drawing from the global RNG (so the run trains as one without probe)."""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch
from lightning.pytorch.utilities.seed import isolate_rng


def inputs_of(batch: Any) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(inputs, targets or None) of a batch given as a tuple, a list, a dict or a tensor."""
    if isinstance(batch, (tuple, list)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    if isinstance(batch, dict):
        return batch["input_ids"] if "input_ids" in batch else batch["x"], batch.get("targets", batch.get("y"))
    return batch, None


def capture_probe_batch(
    trainer: L.Trainer, pl_module: L.LightningModule, train_batch: Any, probe: str, probe_sequences: Optional[int]
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The probe batch (``probe``: ``val`` or ``train``), at most ``probe_sequences`` sequences, copied."""
    batch = None
    if probe == "val":
        with isolate_rng():  # creating a DataLoader iterator draws from the global RNG
            batch = first_val_batch(trainer)
    if batch is None:
        batch = train_batch
    x, y = inputs_of(batch)
    if probe_sequences is not None:
        x = x[:probe_sequences]
        y = None if y is None else y[:probe_sequences]
    device = pl_module.device
    return x.detach().to(device).clone(), (None if y is None else y.detach().to(device).clone())


def first_val_batch(trainer: L.Trainer) -> Any:
    """The first batch of a fresh validation loader (the trainer's own is left untouched); None without one."""
    loaders = []
    datamodule = trainer.datamodule
    if datamodule is not None:
        try:
            loaders.append(datamodule.val_dataloader())
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
