"""AndreaCLI: LightningCLI with ANDREA's model and data, linked so nothing is said twice.

``model.config.block_size`` and ``model.config.vocab_size`` are linked to the data module, so a
YAML states the context length and vocabulary once. Runs go to ``runs/<experiment>/version_N/``
through a TensorBoard logger, with a checkpoint callback whose arguments are config keys too.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from andrea_lab import tags
from andrea_lab.callbacks import HeldOutEvaluation, RunSummary, StabilityMonitor
from andrea_lab.checkpoint_io import load_checkpoint
from andrea_lab.data import AndreaDataModule
from andrea_lab.module import AndreaLM

DEFAULT_LOGGER = {
    "class_path": "andrea_lab.loggers.AndreaTensorBoardLogger",
    # No placeholder hp_metric: the HParams dashboard should only show real results.
    "init_args": {"save_dir": "runs", "name": "default", "default_hp_metric": False},
}


class AndreaCLI(LightningCLI):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("trainer_defaults", {
            "logger": DEFAULT_LOGGER,
            "log_every_n_steps": 10,
            # Atomic, verified checkpoints (andrea_lab.checkpoint_io).
            "plugins": [{"class_path": "andrea_lab.checkpoint_io.AtomicCheckpointIO"}],
            # The data module splits batches across ranks itself, so that a DDP run sees the same
            # samples as a single process with the same global batch (andrea_lab.data.windows).
            "use_distributed_sampler": False,
        })
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        # exit_on_error=False: a bad argument raises, and andrea_lab.cli prints it as one line
        # instead of the whole usage text.
        kwargs.setdefault("parser_kwargs", {"default_env": False, "exit_on_error": False})
        # AndreaLM.configure_optimizers is the one optimizer setup; no competing CLI keys.
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(AndreaLM, AndreaDataModule, *args, **kwargs)

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's step that lets ``--ckpt_path``'s saved hyperparameters update the config, with the
        file read once, by andrea's loader: LightningCLI's own version calls ``torch.load`` itself, so a
        damaged or unsafe checkpoint would surface as a raw traceback (here: one line, exit 2) or, read
        through both, be loaded twice."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or not Path(ckpt_path).is_file():
            return  # a missing file is reported by the trainer, as in LightningCLI
        hparams = dict(load_checkpoint(ckpt_path).get("hyper_parameters", {}))
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("model.config.block_size", "data.block_size")
        parser.link_arguments("model.config.vocab_size", "data.vocab_size")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": tags.VAL_LOSS,
            "checkpoint.mode": "min",
            "checkpoint.save_last": True,
            "checkpoint.filename": f"step{{step}}-val{{{tags.VAL_LOSS}:.3f}}",
            "checkpoint.auto_insert_metric_name": False,
        })
        # On by default; configured as stability.* and summary.* (docs/stability.md).
        parser.add_lightning_class_args(StabilityMonitor, "stability")
        parser.add_lightning_class_args(HeldOutEvaluation, "heldout")
        parser.add_lightning_class_args(RunSummary, "summary")
