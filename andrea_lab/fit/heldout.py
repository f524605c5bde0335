"""HeldOutEvaluation: score the model on windows across all held-out documents, with a standard error.

At the end of a fit :class:`~andrea_lab.fit.RunSummary` asks this callback for the held-out
record (``summary.json``'s ``heldout``); ``andrea validate`` runs it after Lightning's own validation
and writes ``validate.json`` into the run the checkpoint belongs to (``<run>/checkpoints/x.ckpt`` ->
``<run>/validate.json``; a checkpoint outside a run gets ``<x>.validate.json`` beside it). Which windows
are scored, and why the standard error is taken over documents, is in :mod:`andrea_lab.data.heldout`.

The evaluation can take minutes on a loaded CPU after Lightning's last line, so it prints where it is
(:class:`andrea_lab.data.progress.Progress`): a line when it starts, about every 10 s, and when done.

Under DDP each rank scores every ``world_size``-th window and the per-document sums are added up
across ranks, so the result is the same as on one device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path
from typing import Any, Optional

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from andrea_lab.data.heldout import DEFAULT_MAX_TOKENS, HeldOutDataset, HeldOutPlan, capped_mean, clustered_mean
from andrea_lab.data.judging_split import judging_parts
from andrea_lab.data.progress import Progress
from andrea_lab.data.settings import MAX_SEED
from andrea_lab.data.tokenizer import token_byte_lengths
from andrea_lab.errors import CheckpointStateError, UsageError
from andrea_lab.files import write_json_atomic
from andrea_lab.fit.eval_batch import eval_batch_size, memory_bound, scoring_precision
from andrea_lab.runs import tags
from andrea_lab.runs.directory import SCHEMA_VERSION, VALIDATE_FILE, HeldOut, finite_or_none, package_versions
from andrea_lab.runs.heldout_names import DOCUMENT_WEIGHTED, TOKEN_WEIGHTED


def record_path(ckpt_path: Optional[str]) -> Optional[Path]:
    """Where ``andrea validate`` writes the held-out record of ``ckpt_path``: into its run (``<run>/checkpoints/``
    -> ``<run>/validate.json``), else beside the file (``x.validate.json``); None without a checkpoint."""
    if not ckpt_path:
        return None
    ckpt = Path(ckpt_path)
    if ckpt.parent.name == "checkpoints":
        return ckpt.parent.parent / VALIDATE_FILE
    return ckpt.with_name(f"{ckpt.stem}.{VALIDATE_FILE}")


class HeldOutEvaluation(L.Callback):
    """The representative end-of-fit evaluation (``heldout.*`` in a YAML).

    Args:
        enabled: Set false to skip it (summary.json's ``heldout`` is then null).
        max_tokens: Score the whole held-out split when it has at most this many tokens, else a seeded
            uniform sample of this many tokens' worth of windows. Null (the default): sized to the run, a
            quarter of the tokens it trained on (about a twelfth of its training compute: a forward pass
            costs a third of a training step), at least 16,384 and at most 2,097,152 tokens, so a short
            fit is not dominated by its evaluation. Comparisons set it (experiments/cpu-base.yaml does), so
            runs of different lengths are scored on the same windows.
        seed: Seeds that sample; keep it fixed so runs are scored on the same windows.
        batch_size: Windows per forward pass; default (null) as many as fit ``memory_mib`` in one forward, from
            the model's shape and the precision it scores in (:mod:`andrea_lab.fit.eval_batch`). The scores do
            not depend on it.
        memory_mib: The memory a batch may take (MiB); default (null) a quarter of the device's free memory on
            CUDA, half the last-level cache on the CPU (where larger batches were measured slower).
        at_steps: Also score the same windows after these optimizer steps (e.g. ``[100, 200, 300]``): the
            learning curve from which ``andrea compare`` says in how many steps one variant reaches another's
            final loss. Fixed before the runs (a suite's ``common:``), never chosen after looking; each point
            costs one evaluation. Steps beyond ``trainer.max_steps`` never come.
    """

    def __init__(
        self,
        enabled: bool = True,
        max_tokens: Optional[int] = None,
        seed: int = 0,
        batch_size: Optional[int] = None,
        at_steps: Optional[list[int]] = None,
        memory_mib: Optional[int] = None,
    ):
        super().__init__()
        self.at_steps = _steps(at_steps)
        #: ``[{"step", "loss", "se", "document_loss"}]``: the evaluations at ``at_steps`` so far (kept in checkpoints).
        self.curve: list[dict[str, Any]] = []
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise UsageError(
                f"heldout.max_tokens must be a positive number of tokens or null (sized to the run), got {max_tokens!r}"
            )
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"heldout.batch_size must be positive or null, got {batch_size!r}")
        if memory_mib is not None and (isinstance(memory_mib, bool) or memory_mib < 1):
            raise UsageError(
                f"heldout.memory_mib must be a positive number of MiB or null (sized to the device), got {memory_mib!r}"
            )
        if isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:  # numpy's sampler refused -1 at the fit's end
            raise UsageError(f"heldout.seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
        self.enabled = enabled
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.seed = int(seed)
        self.batch_size = batch_size
        self.memory_mib = None if memory_mib is None else int(memory_mib)
        #: What an evaluation sets up before its first forward (the planned windows, the bytes per token, the
        #: documents' names), kept for the next one: the fixed-step curve scores the same windows each time.
        self._prepared: dict[tuple[int, int, str], _Prepared] = {}

    def evaluate(
        self, trainer: L.Trainer, pl_module: L.LightningModule, steps: Optional[int] = None
    ) -> Optional[HeldOut]:
        """Score the planned windows now; None when disabled or the data module has no held-out split.
        ``steps``: the run length the budget is sized to (default: the steps taken so far); the model is
        scored with its evaluation weights (a schedule-free optimizer's average)."""
        datamodule = trainer.datamodule
        if not self.enabled or datamodule is None or not hasattr(datamodule, "heldout_dataset"):
            return None
        weights = getattr(pl_module, "evaluation_weights", contextlib.nullcontext)
        with weights():
            return self._score(trainer, pl_module, datamodule, steps)

    def _score(
        self, trainer: L.Trainer, pl_module: L.LightningModule, datamodule: Any, steps: Optional[int]
    ) -> HeldOut:
        budget = self.max_tokens if self.max_tokens is not None else sized_to_run(trainer, datamodule, steps)
        device = pl_module.device
        prepared = self._prepare(datamodule, budget, device)
        dataset, plan, byte_lengths = prepared.dataset, prepared.dataset.plan, prepared.byte_lengths
        sums = torch.zeros(plan.unit_count, dtype=torch.float64, device=device)
        counts = torch.zeros(plan.unit_count, dtype=torch.float64, device=device)
        text_bytes = torch.zeros((), dtype=torch.float64, device=device)
        mine = list(range(trainer.global_rank, len(dataset), trainer.world_size))
        model = getattr(pl_module, "model", pl_module)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), trainer.precision_plugin.forward_context():
                parameter = next(model.parameters(), None)
                dtype, precision = scoring_precision(device, torch.float32 if parameter is None else parameter.dtype)
                batch_size = self._batch_size(model, datamodule, dtype, device)
                progress = Progress(
                    math.ceil(len(mine) / batch_size),
                    f"held-out evaluation of {len(dataset)} windows",
                    say=rank_zero_info,
                )
                for batch, first in enumerate(range(0, len(mine), batch_size), start=1):
                    x, y, units = (
                        torch.stack(parts).to(device)
                        for parts in zip(*(dataset[i] for i in mine[first : first + batch_size]))
                    )
                    logits, _ = model(x)
                    losses = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
                    sums.index_add_(0, units.flatten(), losses.double())
                    counts.index_add_(0, units.flatten(), torch.ones_like(losses, dtype=torch.float64))
                    if byte_lengths is not None:
                        text_bytes += byte_lengths[y.flatten()].sum()
                    progress.step(batch)
        finally:
            model.train(was_training)
        if trainer.world_size > 1:
            sums = trainer.strategy.reduce(sums, reduce_op="sum")
            counts = trainer.strategy.reduce(counts, reduce_op="sum")
            text_bytes = trainer.strategy.reduce(text_bytes, reduce_op="sum")
        scored_bytes = int(text_bytes.item()) if byte_lengths is not None else None
        record = self._record(plan, sums.cpu().numpy(), counts.cpu().numpy(), scored_bytes, budget, prepared.documents)
        return dataclasses.replace(record, precision=precision, batch_size=batch_size)

    def _prepare(self, datamodule: Any, budget: int, device: torch.device) -> _Prepared:
        """The evaluation's set-up for these windows, made on the first call and kept for the next ones."""
        key = (id(datamodule), int(budget), str(device))
        prepared = self._prepared.get(key)
        if prepared is None or prepared.datamodule is not datamodule:
            dataset: HeldOutDataset = datamodule.heldout_dataset(budget, self.seed)
            documents = _documents_of(dataset.plan, datamodule)
            prepared = _Prepared(datamodule, dataset, _byte_lengths(datamodule, device), documents)
            self._prepared[key] = prepared
        return prepared

    def _batch_size(self, model: Any, datamodule: Any, dtype: torch.dtype, device: torch.device) -> int:
        """``heldout.batch_size``, else as many windows as the memory bound holds in ``dtype``
        (:mod:`andrea_lab.fit.eval_batch`); a model without an ANDREA config: the data module's batch size."""
        if self.batch_size:
            return int(self.batch_size)
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "block_size"):
            return int(getattr(datamodule, "batch_size", 16))
        bound = self.memory_mib << 20 if self.memory_mib is not None else memory_bound(device)
        return eval_batch_size(config, torch.finfo(dtype).bits // 8, bound)

    def _record(
        self,
        plan: HeldOutPlan,
        loss_sums: Any,
        token_counts: Any,
        scored_bytes: Optional[int],
        budget: int,
        documents: dict[str, Optional[list[str]]],
    ) -> HeldOut:
        """The held-out record from the per-document sums: both scores, bits per byte, the sums themselves."""
        loss, se = clustered_mean(loss_sums, token_counts)
        document_loss, document_se, cap, largest_share = capped_mean(loss_sums, token_counts)
        return HeldOut(
            loss=finite_or_none(loss),
            se=finite_or_none(se),
            tokens=int(token_counts.sum()),
            documents=int((token_counts > 0).sum()),
            windows=int(plan.window_starts.size),
            split_tokens=plan.split_tokens,
            sampled=plan.sampled,
            se_unit=plan.se_unit,
            seed=self.seed,
            bytes=scored_bytes,
            bits_per_byte=_bits_per_byte(float(loss_sums.sum()), scored_bytes),
            max_tokens=int(budget),
            document_loss=finite_or_none(document_loss),
            document_se=finite_or_none(document_se),
            document_cap=float(cap),
            largest_document_share=float(largest_share),
            per_document={**documents, **per_document_sums(loss_sums, token_counts)},
            strata=strata_scores(loss_sums, token_counts, documents["strata"]),
            parts=strata_scores(loss_sums, token_counts, documents["parts"]),
        )

    # ------------------------------------------------------------ the curve at fixed steps

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step not in self.at_steps or any(point["step"] == step for point in self.curve):
            return  # not a fixed step, or already scored (gradient accumulation: several batches per step)
        planned = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        heldout = self.evaluate(trainer, pl_module, steps=planned)  # the windows of the final evaluation
        if heldout is None:
            return
        self.curve.append(
            {"step": int(step), "loss": heldout.loss, "se": heldout.se, "document_loss": heldout.document_loss}
        )
        if heldout.loss is not None and trainer.logger is not None and trainer.is_global_zero:
            # Straight to the logger at this step: self.log would re-log the value at every later logging step.
            trainer.logger.log_metrics({tags.HELDOUT_LOSS: heldout.loss}, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"curve": [dict(point) for point in self.curve]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A resumed fit keeps the points scored before it stopped (checked: a handed checkpoint's state is
        plain numbers or nothing)."""
        curve = state_dict.get("curve") if isinstance(state_dict, dict) else None
        if curve is not None and not isinstance(curve, list):
            raise CheckpointStateError(
                f"the held-out evaluation's state in the checkpoint is malformed (its curve is {type(curve).__name__}, "
                "not a list of points); resume from another checkpoint, or start the run afresh"
            )
        self.curve = [
            {
                "step": int(p["step"]),
                "loss": finite_or_none(p.get("loss")),
                "se": finite_or_none(p.get("se")),
                "document_loss": finite_or_none(p.get("document_loss")),
            }
            for p in curve or []
            if isinstance(p, dict) and isinstance(p.get("step"), int) and not isinstance(p.get("step"), bool)
        ]

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """``andrea validate``: the held-out record of the checkpoint, as ``validate.json``."""
        if trainer.state.fn != TrainerFn.VALIDATING or trainer.sanity_checking:
            return
        heldout = self.evaluate(trainer, pl_module)
        if heldout is None or not trainer.is_global_zero:
            return
        val_loss = trainer.callback_metrics.get(tags.VAL_LOSS)
        record: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "checkpoint": trainer.ckpt_path,
            "val_loss": finite_or_none(val_loss),
            "heldout": dataclasses.asdict(heldout),
            "data": trainer.datamodule.provenance() if hasattr(trainer.datamodule, "provenance") else {},
            "versions": package_versions(),
        }
        path = record_path(trainer.ckpt_path)
        if path is None:
            rank_zero_info(f"held-out loss {format_heldout(heldout)} (no --ckpt_path: no {VALIDATE_FILE} written)")
            return
        write_json_atomic(path, record)
        rank_zero_info(f"held-out loss {format_heldout(heldout)}; record: {path}")


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What an evaluation of one data module's windows sets up once (:meth:`HeldOutEvaluation._prepare`)."""

    datamodule: Any
    dataset: HeldOutDataset
    byte_lengths: Optional[torch.Tensor]
    documents: dict[str, Optional[list[str]]]


#: The bounds of a held-out budget sized to the run (``heldout.max_tokens: null``).
SIZED_MIN_TOKENS = 16_384
SIZED_SHARE = 4  # a quarter of the tokens trained on


def _steps(at_steps: Any) -> tuple[int, ...]:
    """``heldout.at_steps``: positive optimizer steps, sorted, each once."""
    if at_steps is None:
        return ()
    values = list(at_steps) if isinstance(at_steps, (list, tuple)) else [at_steps]
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(
                f"heldout.at_steps must be a list of optimizer steps >= 1, e.g. [100, 200], got {at_steps!r}"
            )
    return tuple(sorted(set(values)))


def sized_to_run(trainer: L.Trainer, datamodule: Any, steps: Optional[int] = None) -> int:
    """The held-out budget of a run without ``heldout.max_tokens``: a quarter of the tokens its optimizer
    steps consumed (``steps``, default the steps taken; all ranks, gradient accumulation included), between
    :data:`SIZED_MIN_TOKENS` and :data:`DEFAULT_MAX_TOKENS`."""
    per_step = (
        int(getattr(datamodule, "batch_size", 1))
        * int(getattr(datamodule, "block_size", 1))
        * int(trainer.accumulate_grad_batches)
        * int(trainer.world_size)
    )
    steps = int(trainer.global_step if steps is None else steps)
    return max(SIZED_MIN_TOKENS, min(DEFAULT_MAX_TOKENS, steps * per_step // SIZED_SHARE))


def _documents_of(plan: HeldOutPlan, datamodule: Any) -> dict[str, Optional[list[str]]]:
    """Each scored unit's document name, stratum (andrea_lab.data.strata), family and part of the selection/test
    split (andrea_lab.data.judging_split), where the data knows them."""
    found: dict[str, Optional[list[str]]] = {"names": None, "strata": None, "families": None, "parts": None}
    if plan.se_unit != "documents":
        return found
    for key, method in (
        ("names", "val_document_names"),
        ("strata", "val_document_strata"),
        ("families", "val_document_families"),
    ):
        values = getattr(datamodule, method, lambda: None)()
        if values is not None and int(plan.unit_ids.max(initial=-1)) < len(values):
            found[key] = [values[int(i)] for i in plan.unit_ids]
    if found["families"] is not None:
        found["parts"] = judging_parts(found["families"])
    return found


def per_document_sums(loss_sums: Any, token_counts: Any) -> dict[str, list]:
    """summary.json's ``heldout.per_document`` numbers: each scored document's tokens and summed loss, in
    stream order (beside its name and stratum), from which every score of the record recomputes."""
    return {"tokens": [int(n) for n in token_counts], "loss_sums": [finite_or_none(float(x)) for x in loss_sums]}


def strata_scores(loss_sums: Any, token_counts: Any, strata: Optional[list[str]]) -> Optional[dict[str, Any]]:
    """``{stratum: {"loss", "se", "documents", "tokens"}}``: the document-weighted score within each stratum
    that has scored documents (a stratum here is any label per document: code/prose, or the selection/test
    part); None where the documents' labels are not known."""
    if strata is None:
        return None
    labels = np.asarray(strata)
    scores = {}
    for stratum in sorted(set(strata)):
        mine = (labels == stratum) & (token_counts > 0)
        if not mine.any():
            continue
        loss, se, _, _ = capped_mean(loss_sums[mine], token_counts[mine])
        scores[stratum] = {
            "loss": finite_or_none(loss),
            "se": finite_or_none(se),
            "documents": int(mine.sum()),
            "tokens": int(token_counts[mine].sum()),
        }
    return scores


def _byte_lengths(datamodule: Any, device: torch.device) -> Optional[torch.Tensor]:
    """Bytes of text per token id (:func:`andrea_lab.data.tokenizer.token_byte_lengths`), None where the data
    has no byte-level tokenizer."""
    try:
        tokenizer = getattr(datamodule, "tokenizer", None)
    except RuntimeError:  # not known yet (a data module that was never set up)
        return None
    lengths = None if tokenizer is None else token_byte_lengths(tokenizer)
    return None if lengths is None else torch.tensor(lengths, dtype=torch.float64, device=device)


def _bits_per_byte(total_nats: float, text_bytes: Optional[int]) -> Optional[float]:
    """The loss per byte of text in bits: every token's nats over the bytes they stand for, / ln 2."""
    if not text_bytes:
        return None
    return finite_or_none(total_nats / text_bytes / math.log(2))


#: Below this many held-out documents (or blocks) the printed line says its SE is rough: a standard error over
#: documents estimated from a handful of them is itself noisy, and the loss is then that of a few files.
FEW_DOCUMENTS = 10


def format_heldout(heldout: Optional[HeldOut]) -> str:
    """How a held-out evaluation is printed after "held-out loss ", both forms named
    (:mod:`andrea_lab.runs.heldout_names`), the one ``andrea compare`` ranks first:
    ``(document-weighted) 2.650 ± 0.045, token-weighted 2.613 ± 0.041 (SE over 96 documents, 262,144 tokens)``;
    ``(token-weighted) 2.613 ± 0.041 (...)`` for a record without the document-weighted score."""
    if heldout is None or heldout.loss is None:
        return "n/a"
    rough = ""
    if heldout.documents < FEW_DOCUMENTS:
        rough = f"; only {heldout.documents} {heldout.se_unit}: a rough SE, the score of a few files"
    counts = f"(SE over {heldout.documents} {heldout.se_unit}, {heldout.tokens:,} tokens{rough})"
    by_token = f"{heldout.loss:.3f} ± {_se(heldout.se)} {counts}"
    if heldout.document_loss is None:
        return f"({TOKEN_WEIGHTED}) {by_token}"
    return (
        f"({DOCUMENT_WEIGHTED}) {heldout.document_loss:.3f} ± {_se(heldout.document_se)}, {TOKEN_WEIGHTED} {by_token}"
    )


def _se(se: Optional[float]) -> str:
    return "n/a" if se is None else f"{se:.3f}"
