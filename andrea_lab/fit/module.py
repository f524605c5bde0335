"""AndreaLM: the LightningModule that trains ANDREA with next-token cross-entropy.

Its ``__init__`` signature is the ``model:`` section of an experiment YAML: LightningCLI turns the
typed parameters (and the nested :class:`AndreaConfig`) into config keys and ``--help``. What it
delegates, to :mod:`andrea_lab.fit`: the optimizer and schedule (``optim``), the training arguments'
checks (``args``), the non-finite policy with the gradient norm (``nonfinite``: a callback the module brings
along, so any Trainer gets it), the RNG states of a checkpoint (``rng_state``) and ``init_from``
(``initial_weights``); and the z-loss's objective to :mod:`andrea_lab.fit.z_loss`.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from typing import Any, ClassVar, Literal, Optional, Sequence

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from andrea_lab.errors import UsageError
from andrea_lab.fit.args import TrainingArgs
from andrea_lab.fit.compile_cache import use_compile_cache
from andrea_lab.fit.evaluation_weights import load_training_weights, save_evaluation_weights, swaps_weights
from andrea_lab.fit.initial_weights import InitialWeights
from andrea_lab.fit.log_cadence import logger_writes_now
from andrea_lab.fit.nonfinite import NonFiniteGuard, grad_scaler, takes_found_inf
from andrea_lab.fit.optim import OptimizerChoice, clip_fused, tag_weight_decay
from andrea_lab.fit.rng_state import capture_rng_states, restore_rng_states
from andrea_lab.fit.z_loss import training_objective
from andrea_lab.model.components import check_same_architecture
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.transformer import Andrea
from andrea_lab.runs import tags
from andrea_lab.runs.checkpoint_io import stored_hyperparameters, stored_model_config


class AndreaLM(L.LightningModule):
    """Train ANDREA: by default AdamW (decay on matrices and embeddings), linear warmup then cosine decay.

    Args:
        config: The architecture (defaults: ANDREA-120M).
        lr: Peak learning rate.
        warmup_steps: Linear warmup length in optimizer steps (0 = start at the peak).
        decay_steps: Step at which the cosine reaches ``min_lr_ratio·lr``; None = the trainer's total steps.
        min_lr_ratio: Final learning rate as a fraction of ``lr``.
        weight_decay: Weight decay, applied to weight matrices and embeddings only.
        betas: AdamW betas (also the AdamW part of muon, and schedule_free's; not lion's, which are
            ``optimizer_args.lion_betas``).
        beta2: When set, replaces ``betas[1]`` (β2 alone): a suite's ``search:`` tunes one number per key, and
            ``betas`` is a pair. Set with ``betas``, ``beta2`` wins: ``betas: [0.8, 0.95], beta2: 0.99`` trains
            with (0.8, 0.99), the pair the saved hyperparameters' ``betas`` records.
        eps: AdamW epsilon.
        optimizer: The optimizer plugin (group ``andrea_lab.optimizer``): ``adamw`` (default),
            ``adamw_independent_wd``, ``muon``, ``lion``, ``schedule_free`` or a third party's (``andrea plugins``).
        schedule: The learning-rate schedule plugin (group ``andrea_lab.schedule``): ``warmup_cosine``, ``wsd``,
            ``constant``, ``linear``, ...; null = the optimizer's default (warmup_cosine; constant for
            schedule_free, which takes no other).
        optimizer_args: The optimizer plugin's own options, e.g. ``{momentum: 0.95}`` for muon.
        schedule_args: The schedule plugin's own options, e.g. ``{decay_fraction: 0.2}`` for wsd.
        on_nonfinite: What to do when the loss or gradient norm is NaN/inf: ``stop`` (raise
            DivergenceError; the last good checkpoint is kept) or ``skip`` (drop that step's update).
            Such an update is never applied; the host checks every ``trainer.log_every_n_steps``
            steps and before each checkpoint (no per-step sync, see ``andrea_lab/fit/nonfinite.py``), so
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
        optimizer: str = "adamw",
        schedule: Optional[str] = None,
        optimizer_args: Optional[dict[str, Any]] = None,
        schedule_args: Optional[dict[str, Any]] = None,
        beta2: Optional[float] = None,
    ):
        super().__init__()
        self.config = config if isinstance(config, AndreaConfig) else AndreaConfig(**config)  # a stored dict
        self.args = TrainingArgs(  # every other argument but init_from, checked
            lr=lr,
            warmup_steps=warmup_steps,
            decay_steps=decay_steps,
            min_lr_ratio=min_lr_ratio,
            weight_decay=weight_decay,
            betas=betas,
            eps=eps,
            on_nonfinite=on_nonfinite,
            max_skipped_steps=max_skipped_steps,
            compile=compile,
            z_loss=z_loss,
            optimizer=optimizer,
            schedule=schedule,
            optimizer_args=optimizer_args,
            schedule_args=schedule_args,
            beta2=beta2,
        )
        # Saved as plain values (checkpoints load weights-only, hparams.yaml stays plain YAML), the same keys
        # as ever; not init_from: a checkpoint of this run is complete without the file it started from.
        # A dict, not the bare call, which under LightningCLI would save the CLI's dump of its arguments.
        self.save_hyperparameters({"config": asdict(self.config), **asdict(self.args)})
        self.model = Andrea(self.config)
        tag_weight_decay(self.model)
        self.optimizer_choice = OptimizerChoice.of(self.args)
        self.optimizer_choice.check(self.model)  # a bad name or option fails here, before any run directory
        self._optimizer_plugin = None  # set by configure_optimizers
        self._evaluating = contextlib.ExitStack()
        self._initial_weights = InitialWeights.load_into(self, init_from) if init_from else None
        self.val_loss, self.val_perplexity = MeanMetric(), Perplexity()
        #: The one owner of the non-finite policy and tally, and this module's callback (configure_callbacks);
        #: the stability monitor reads it (nonfinite.guard_of).
        self.nonfinite = NonFiniteGuard(self.args.on_nonfinite, self.args.max_skipped_steps)

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any], path: str) -> "AndreaLM":
        """The module a loaded checkpoint (``checkpoint_io.load_checkpoint``) holds, weights included."""
        if stored_model_config(checkpoint) is None:
            raise UsageError(f"{path} is not an andrea checkpoint (no model config in its hyper_parameters)")
        hparams = stored_hyperparameters(checkpoint)
        with torch.device("meta"):  # the shapes its config describes, before a byte is allocated for them
            skeleton = cls(**hparams)
        check_weights_fit(skeleton.state_dict(), checkpoint.get("state_dict"), path)
        module = cls(**hparams)
        module.load_state_dict(checkpoint["state_dict"])
        check_finite_weights(module, path)
        return module

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if self._initial_weights is not None and datamodule is not None:
            self._initial_weights.check_data(datamodule)

    def configure_model(self) -> None:
        # nn.Module.compile compiles in place: parameter names, and so checkpoints, stay the same.
        # Its caches go to this shape's entry in the user's cache first: a later fit of it loads, not compiles.
        if self.args.compile and not getattr(self, "_compiled", False):
            precision = str(self.trainer.precision) if self._trainer is not None else "unknown"
            self.compile_cache = use_compile_cache(asdict(self.config), precision)
            self.model.compile()
            self._compiled = True

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(idx, targets)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        objective, loss, penalty = training_objective(self.model, x, y, self.args.z_loss)  # penalty: the z-loss
        self.log(tags.TRAIN_LOSS, loss, prog_bar=True)  # the cross-entropy, with or without the z-loss
        self.nonfinite.last_loss = objective.detach()  # checked with the gradient norm before the step
        if logger_writes_now(self.trainer):
            self.log(tags.TRAIN_LR, self.lr_schedulers().get_last_lr()[0])
            self.log(tags.TRAIN_TOKENS, float((self.global_step + 1) * x.numel() * self.trainer.world_size))
            if penalty is not None:
                self.log(tags.TRAIN_Z_LOSS, penalty)
        return objective

    def configure_callbacks(self) -> Sequence[L.Callback]:
        """The non-finite guard, for every Trainer this module is fitted with: Lightning adds it after the
        trainer's own callbacks (ModelCheckpoint last), in place of any other of its type."""
        return [self.nonfinite]

    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Without a ``GradScaler``, a fused AdamW clips with the norm already measured (optim.clip_fused),
        where Lightning's mixed-precision plugin would refuse it under bf16-mixed although bf16 scales nothing."""
        if not (gradient_clip_val and takes_found_inf(optimizer) and grad_scaler(self.trainer) is None):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        clip_fused(optimizer, float(gradient_clip_val), gradient_clip_algorithm, self.nonfinite.last_grad_norm)

    def evaluation_weights(self) -> contextlib.AbstractContextManager:
        """The optimizer plugin's evaluation weights (schedule-free: its average), or nothing to switch."""
        optimizers = self.trainer.optimizers if self._trainer is not None else []
        if self._optimizer_plugin is None or not optimizers:
            return contextlib.nullcontext()
        return self._optimizer_plugin.evaluation_weights(optimizers[0])

    def on_validation_epoch_start(self) -> None:
        self._evaluating.enter_context(self.evaluation_weights())

    def on_validation_epoch_end(self) -> None:
        self._log_initial_validation()
        self._evaluating.close()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng_states"] = capture_rng_states()  # a resumed run continues as an uninterrupted one
        if swaps_weights(self._optimizer_plugin):
            save_evaluation_weights(checkpoint, self.state_dict, self.evaluation_weights())
        # The guard's part here, not in its own callback hook, which a weights-only checkpoint skips: it
        # settles first, so "stop" raises before a checkpoint of a diverged run is written.
        self.nonfinite.save_into(checkpoint, self._trainer)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        check_same_architecture(self.config, stored_model_config(checkpoint))
        load_training_weights(checkpoint)  # before Lightning loads checkpoint["state_dict"]
        if checkpoint.get("rng_states"):
            restore_rng_states(checkpoint["rng_states"])
        self.nonfinite.load_from(checkpoint)

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

    def _log_initial_validation(self) -> None:
        # Lightning discards what the sanity check logs. Its loss is the loss at initialisation (about
        # ln(vocab_size)), the natural first point of every curve: log it at step 0.
        if self.trainer.sanity_checking and self.global_step == 0 and self.logger is not None:
            self.logger.log_metrics(
                {
                    tags.VAL_LOSS: float(self.val_loss.compute()),
                    tags.VAL_PERPLEXITY: float(self.val_perplexity.compute()),
                },
                step=0,
            )

    def configure_optimizers(self):
        args = self.args
        decay_steps = args.decay_steps or max(1, int(self.trainer.estimated_stepping_batches))
        # fp16 with clipping: the scaler must unscale before the clip, which a fused AdamW does not allow.
        clips_under_scaler = (
            self._trainer is not None and grad_scaler(self.trainer) is not None and bool(self.trainer.gradient_clip_val)
        )
        optimizer, scheduler, self._optimizer_plugin = self.optimizer_choice.build(
            self.model, decay_steps, fused=self.use_fused_adamw and not clips_under_scaler
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_weights_fit(expected: dict[str, torch.Tensor], stored: Any, path: str) -> None:
    """The checkpoint's tensors are exactly those its model config describes (names and shapes): a handed
    checkpoint whose config asks for more layers or wider ones than its weights hold is refused before the
    model is built (its config could ask for gigabytes), with one line naming the first differences."""
    if not isinstance(stored, dict):
        raise UsageError(f"{path} has no state_dict of weights")
    problems = [f"{name} missing" for name in expected if name not in stored]
    problems += [f"unexpected {name}" for name in stored if name not in expected]
    problems += [
        f"{name} is {tuple(stored[name].shape)}, the config needs {tuple(tensor.shape)}"
        for name, tensor in expected.items()
        if name in stored and (not isinstance(stored[name], torch.Tensor) or stored[name].shape != tensor.shape)
    ]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise UsageError(
            f"{path}: its weights do not fit the model its config describes: {'; '.join(problems[:3])}{more}; "
            "the checkpoint is damaged or was edited"
        )


def check_finite_weights(module: torch.nn.Module, path: str) -> None:
    """Every weight is a finite number: a checkpoint of a run that blew up (or an edited one) would sample or
    score NaN; say which tensor instead."""
    for name, parameter in module.named_parameters():
        if not torch.isfinite(parameter).all():
            raise UsageError(
                f"{path}: weight {name} holds NaN or infinite values (a run that blew up, or a damaged file); "
                "use a checkpoint from before the blow-up"
            )
