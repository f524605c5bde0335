"""HeldOutEvaluation: score the model on windows across all held-out documents, with a standard error.

At the end of a fit :class:`~andrea_lab.callbacks.RunSummary` asks this callback for the held-out
record (``summary.json``'s ``heldout``); ``andrea validate`` runs it after Lightning's own validation
and writes ``validate.json`` beside the run's other files. Which windows are scored, and why the
standard error is taken over documents, is in :mod:`andrea_lab.data.heldout`.

Under DDP each rank scores every ``world_size``-th window and the per-document sums are added up
across ranks, so the result is the same as on one device.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from andrea_lab import tags
from andrea_lab.data.heldout import DEFAULT_MAX_TOKENS, HeldOutDataset, clustered_mean
from andrea_lab.files import write_json_atomic
from andrea_lab.rundir import SCHEMA_VERSION, VALIDATE_FILE, HeldOut, finite_or_none, package_versions


class HeldOutEvaluation(L.Callback):
    """The representative end-of-fit evaluation (``heldout.*`` in a YAML).

    Args:
        enabled: Set false to skip it (summary.json's ``heldout`` is then null).
        max_tokens: Score the whole held-out split when it has at most this many tokens, else a seeded
            uniform sample of this many tokens' worth of windows.
        seed: Seeds that sample; keep it fixed so runs are scored on the same windows.
        batch_size: Windows per forward pass; default the data module's batch size.
    """

    def __init__(self, enabled: bool = True, max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = 0,
                 batch_size: Optional[int] = None):
        super().__init__()
        if max_tokens < 1:
            raise ValueError(f"heldout.max_tokens must be a positive number of tokens, got {max_tokens!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"heldout.batch_size must be positive or null, got {batch_size!r}")
        self.enabled = enabled
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.batch_size = batch_size

    def evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> Optional[HeldOut]:
        """Score the planned windows now; None when disabled or the data module has no held-out split."""
        datamodule = trainer.datamodule
        if not self.enabled or datamodule is None or not hasattr(datamodule, "heldout_dataset"):
            return None
        dataset: HeldOutDataset = datamodule.heldout_dataset(self.max_tokens, self.seed)
        plan = dataset.plan
        batch_size = self.batch_size or getattr(datamodule, "batch_size", 16)
        device = pl_module.device
        sums = torch.zeros(plan.unit_count, dtype=torch.float64, device=device)
        counts = torch.zeros(plan.unit_count, dtype=torch.float64, device=device)
        mine = list(range(trainer.global_rank, len(dataset), trainer.world_size))
        model = getattr(pl_module, "model", pl_module)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), trainer.precision_plugin.forward_context():
                for first in range(0, len(mine), batch_size):
                    x, y, units = (torch.stack(parts).to(device) for parts in
                                   zip(*(dataset[i] for i in mine[first:first + batch_size])))
                    logits, _ = model(x)
                    losses = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
                    sums.index_add_(0, units.flatten(), losses.double())
                    counts.index_add_(0, units.flatten(), torch.ones_like(losses, dtype=torch.float64))
        finally:
            model.train(was_training)
        if trainer.world_size > 1:
            sums = trainer.strategy.reduce(sums, reduce_op="sum")
            counts = trainer.strategy.reduce(counts, reduce_op="sum")
        loss, se = clustered_mean(sums.cpu().numpy(), counts.cpu().numpy())
        return HeldOut(loss=finite_or_none(loss), se=finite_or_none(se), tokens=int(counts.sum().item()),
                       documents=int((counts > 0).sum().item()), windows=len(dataset),
                       split_tokens=plan.split_tokens, sampled=plan.sampled, se_unit=plan.se_unit, seed=self.seed)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """``andrea validate``: the held-out record of the checkpoint, as ``validate.json``."""
        if trainer.state.fn != TrainerFn.VALIDATING or trainer.sanity_checking:
            return
        heldout = self.evaluate(trainer, pl_module)
        if heldout is None or not trainer.is_global_zero:
            return
        val_loss = trainer.callback_metrics.get(tags.VAL_LOSS)
        record: dict[str, Any] = {
            "schema": SCHEMA_VERSION, "checkpoint": trainer.ckpt_path,
            "val_loss": finite_or_none(val_loss), "heldout": dataclasses.asdict(heldout),
            "data": trainer.datamodule.provenance() if hasattr(trainer.datamodule, "provenance") else {},
            "versions": package_versions(),
        }
        log_dir = getattr(trainer.logger, "log_dir", None) or trainer.default_root_dir
        path = Path(log_dir) / VALIDATE_FILE
        write_json_atomic(path, record)
        rank_zero_info(f"held-out loss {format_heldout(heldout)}; record: {path}")


def format_heldout(heldout: Optional[HeldOut]) -> str:
    """``2.613 ± 0.041 (SE over 96 documents, 262,144 tokens)`` -- how a held-out loss is printed."""
    if heldout is None or heldout.loss is None:
        return "n/a"
    se = "n/a" if heldout.se is None else f"{heldout.se:.3f}"
    return f"{heldout.loss:.3f} ± {se} (SE over {heldout.documents} {heldout.se_unit}, {heldout.tokens:,} tokens)"
