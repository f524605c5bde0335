"""AndreaCLI: LightningCLI with ANDREA's model and data, linked so nothing is said twice.

``model.config.block_size`` and ``model.config.vocab_size`` are linked to the data module, so a
YAML states the context length and vocabulary once. Runs go to ``runs/<experiment>/version_N/``
through a TensorBoard logger, with a checkpoint callback whose arguments are config keys too.
"""

from __future__ import annotations

import sys
from copy import deepcopy
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, Trainer
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from andrea_lab import safe_yaml
from andrea_lab.data import AndreaDataModule
from andrea_lab.errors import CheckpointStateError, PreemptedError, UsageError
from andrea_lab.files import atomic_write
from andrea_lab.fit.argument_checks import (
    check_logger_arguments,
    check_special_checkpoint,
    check_trainer_arguments,
    is_number,
)
from andrea_lab.fit.checkpoint import AndreaModelCheckpoint
from andrea_lab.fit.cpu_cost import cpu_step_note, machine_memory_bytes, step_memory_refusal
from andrea_lab.fit.handed import (
    check_name_templates,
    check_no_links_to_the_run,
    check_plain_sections,
    check_resumed_directory,
    check_weights_only,
    check_writes_inside,
    keep_class_specs_as_data,
    require_safe_checkpoint_io,
    require_safe_checkpoint_reading,
)
from andrea_lab.fit.heldout import HeldOutEvaluation
from andrea_lab.fit.module import AndreaLM
from andrea_lab.fit.preemption import PreemptionCheckpoint
from andrea_lab.fit.stability.monitor import StabilityMonitor
from andrea_lab.fit.summary import RunSummary
from andrea_lab.fit.vocab_fit import fit_vocabulary
from andrea_lab.fit.write_paths import check_path_options, use_run_as_root
from andrea_lab.runs import tags
from andrea_lab.runs.checkpoint_io import load_checkpoint, stored_hyperparameters
from andrea_lab.runs.claim import claim_run_directory, remove_if_unused
from andrea_lab.runs.resume_rules import MAY_CHANGE, check_resume

DEFAULT_LOGGER = {
    "class_path": "andrea_lab.fit.loggers.AndreaTensorBoardLogger",
    # No placeholder hp_metric: the HParams dashboard should only show real results.
    "init_args": {"save_dir": "runs", "name": "default", "default_hp_metric": False},
}


def _without_changeable(hparams: dict[str, Any], model: Any) -> dict[str, Any]:
    """The checkpoint's hyperparameters without the fields a resumed fit may change (so the user's value wins)."""
    kept = {key: value for key, value in hparams.items() if f"model.{key}" not in MAY_CHANGE}
    if isinstance(kept.get("config"), dict):
        kept["config"] = {
            key: value for key, value in kept["config"].items() if f"model.config.{key}" not in MAY_CHANGE
        }
    return kept


class AtomicSave:
    """The config parser, except that ``save`` writes the file whole or not at all (files.atomic_write):
    jsonargparse truncates ``config.yaml`` and then writes it, so a resume killed in between (or a dump
    that fails) would leave a run that can no longer be resumed."""

    def __init__(self, parser: Any):
        self._parser = parser

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)

    def save(self, cfg: Any, path: str, skip_none: bool = True, **ignored: Any) -> None:
        text = self._parser.dump(cfg, skip_none=skip_none)
        atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


class RerunnableConfig(SaveConfigCallback):
    """Saves ``config.yaml`` as a config that *reruns* the experiment: without the logger's version and
    ``ckpt_path`` (a resume sets both), so ``andrea fit --config RUN/config.yaml`` starts a new version
    instead of writing into this run. ``andrea fit --resume RUN`` adds both back itself."""

    def setup(self, trainer: Trainer, pl_module, stage: str) -> None:
        if not isinstance(self.parser, AtomicSave):
            self.parser = AtomicSave(self.parser)
        config = self.config.clone()
        if config.get("ckpt_path") is not None:
            config["ckpt_path"] = None
        if config.get("trainer.logger.init_args.version") is not None:
            config["trainer.logger.init_args.version"] = None
        self.config = config
        super().setup(trainer, pl_module, stage)


def check_callback_states(callbacks: list[Callback], stored: Any) -> None:
    """Restore each callback's state from the checkpoint into a copy of it, before the fit writes anything:
    a malformed state (a handed or damaged file) is refused in one line (each callback's ``load_state_dict``
    raises :class:`~andrea_lab.errors.CheckpointStateError`) before a run directory is made for a fit that
    would stop at once. Lightning restores the real callbacks later, from the same states."""
    if stored is None:
        return
    if not isinstance(stored, dict):
        raise CheckpointStateError(
            f"the callbacks' states in the checkpoint: the mapping is malformed (a {type(stored).__name__}); "
            "resume from another checkpoint, or start the run afresh"
        )
    for callback in callbacks:
        state = stored.get(callback.state_key)
        if state is None:
            continue
        twin = deepcopy(callback)
        # A callback that keeps its state for on_train_start (the monitor, the summary) applies it there.
        (twin.apply_state if hasattr(twin, "apply_state") else twin.load_state_dict)(state)


def _plain_progress_bar(config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """Lightning's TQDM bar unless the user chose a bar or none. Lightning's own default is Rich's
    whenever ``rich`` is installed (any ``transformers`` pulls it in), which writes "Epoch 0/-2" into a
    log that is not a terminal, so the bar would depend on what else is installed."""
    from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

    chosen = [*(config.get("callbacks") or []), *callbacks]
    if config.get("enable_progress_bar") is False or any(isinstance(c, ProgressBar) for c in chosen):
        return []
    return [TQDMProgressBar()]


#: The subcommands that score a checkpoint: they start no run of their own (see AndreaCLI.instantiate_trainer).
EVALUATIONS = ("validate", "test")


def refuse_abbreviations(parser_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``parser_kwargs`` with abbreviated options refused: argparse would take ``--trainer.max_step 5`` for
    ``--trainer.max_steps`` without a word, so a typo silently becomes some key. (jsonargparse gives every
    subcommand's parser the main parser's setting.)"""
    return {**parser_kwargs, "allow_abbrev": False}


class AndreaCLI(LightningCLI):
    def __init__(self, *args, resume_dir: str | None = None, **kwargs):
        #: The run ``andrea fit --resume`` continues: the fit must write there and nowhere else.
        self.resume_dir = resume_dir
        #: The callbacks' states in the checkpoint a fit resumes from, checked before the run directory is
        #: claimed (:func:`check_callback_states`); None without ``--ckpt_path``.
        self._stored_callback_states: Any = None
        kwargs.setdefault(
            "trainer_defaults",
            {
                "logger": DEFAULT_LOGGER,
                "log_every_n_steps": 10,
                # Atomic, verified checkpoints (andrea_lab.runs.checkpoint_io).
                "plugins": [{"class_path": "andrea_lab.runs.checkpoint_io.AtomicCheckpointIO"}],
                # The data module splits batches across ranks itself, so that a DDP run sees the same
                # samples as a single process with the same global batch (andrea_lab.data.windows).
                "use_distributed_sampler": False,
            },
        )
        kwargs.setdefault("save_config_callback", RerunnableConfig)
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        # exit_on_error=False: a bad argument raises, and andrea_lab.cli prints it as one line
        # instead of the whole usage text.
        kwargs.setdefault("parser_kwargs", {"default_env": False, "exit_on_error": False})
        kwargs["parser_kwargs"] = refuse_abbreviations(kwargs["parser_kwargs"])
        # AndreaLM.configure_optimizers is the one optimizer setup; no competing CLI keys.
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(AndreaLM, AndreaDataModule, *args, **kwargs)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Lightning's parse (YAML read within :mod:`andrea_lab.safe_yaml`'s bounds), then the values it
        accepts but that would crash or silently misbehave later refused here (:func:`check_arguments`)."""
        install_bounded_yaml()
        keep_class_specs_as_data()
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand:
            check_arguments(subcommand, self.config[subcommand])

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's step that lets ``--ckpt_path``'s saved hyperparameters update the config, with the
        file read once, by andrea's loader: LightningCLI's own version calls ``torch.load`` itself, so a
        damaged or unsafe checkpoint would surface as a raw traceback (here: one line, exit 2) or, read
        through both, be loaded twice."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or not Path(ckpt_path).is_file():
            return  # a missing file is reported by the trainer, as in LightningCLI
        checkpoint = load_checkpoint(ckpt_path)
        hparams = stored_hyperparameters(checkpoint)
        if subcommand == "fit":
            self._stored_callback_states = checkpoint.get("callbacks")
            section = self.config[subcommand]
            check_resume(ckpt_path, checkpoint, section.get("model"), section.get("data"))
            hparams = _without_changeable(hparams, section.get("model"))
        if not hparams:
            return
        # load_checkpoint refused any class the hyperparameters name (andrea_lab.runs.handed_hparams).
        self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)

    def before_instantiate_classes(self) -> None:
        """A fresh fit on a user's own small text folder gets a BPE it can learn (andrea_lab.fit.vocab_fit),
        decided here because the model's embedding is sized from it; said on one line."""
        section = self.config["fit"] if self.config.get("subcommand") == "fit" else None
        if section is not None and not section.get("ckpt_path"):
            note = fit_vocabulary(section)
            if note:
                print(note, file=sys.stderr, flush=True)

    def instantiate_classes(self) -> None:
        """LightningCLI's instantiation, except that with ``--ckpt_path`` (a resumed fit, or validate/test of
        a checkpoint) the module is built without ``model.init_from``: the weights come from the checkpoint,
        so the file the run started from is not read again (it may be gone). The config that is saved keeps
        ``init_from`` as given, so a rerun of config.yaml still starts from it."""
        subcommand = self.config.get("subcommand")
        section = self.config[subcommand] if subcommand else self.config
        model = section.get("model")
        init_from = model.get("init_from") if hasattr(model, "get") else None
        if not section.get("ckpt_path") or not init_from:
            self._instantiate_arguments()
            return
        model["init_from"] = None
        try:
            self._instantiate_arguments()
        finally:
            model["init_from"] = init_from

    def _instantiate_arguments(self) -> None:
        """What a callback refuses while it is built from the arguments (``--checkpoint.save_top_k -5``,
        ``--stability.stuck_after -1``: Lightning's MisconfigurationException, a ValueError) is a bad argument:
        one line, exit status 2, before any file is written."""
        try:
            super().instantiate_classes()
        except (MisconfigurationException, ValueError) as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"invalid argument: {exc}") from None

    def before_fit(self) -> None:
        """Claim the run directory before the first file is written (andrea_lab.runs.claim): never an
        existing run unless this fit resumes it, never through a symbolic link, one fit at a time; and only
        inside it (andrea_lab.fit.handed, andrea_lab.fit.write_paths: every component's path option, and
        ``default_root_dir`` made the run directory). Without a logger the run directory is ``default_root_dir``."""
        self._refuse_a_step_beyond_memory()
        self._say_cpu_cost()
        if not self.trainer.is_global_zero:
            return
        # Before the logger claims its version directory (reading log_dir does): a refused fit leaves nothing.
        require_safe_checkpoint_reading(self.trainer, self.config["fit"].get("ckpt_path"))
        check_callback_states(self.trainer.callbacks, self._stored_callback_states)
        check_no_links_to_the_run(self.trainer.logger)
        run_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)
        check_resumed_directory(run_dir, self.resume_dir)
        check_writes_inside(self.trainer, run_dir)
        check_path_options(self.trainer, run_dir, self._stored_callback_states)
        self._run_lock = claim_run_directory(run_dir, self.config["fit"].get("ckpt_path"))
        made = getattr(self.trainer.logger, "made_version_dir", False)
        self._made_run_dir = run_dir if made else None  # a fit that fails before writing into it leaves none
        use_run_as_root(self.trainer, run_dir)

    def _refuse_a_step_beyond_memory(self) -> None:
        """A CPU step whose logits alone exceed this machine's memory is refused before anything is allocated
        (andrea_lab.fit.cpu_cost.step_memory_refusal). One micro-batch's logits are in memory at a time:
        accumulation and other ranks do not add to them."""
        if not isinstance(self.trainer.accelerator, CPUAccelerator):
            return
        tokens = self.datamodule.batch_size * self.datamodule.block_size
        refusal = step_memory_refusal(tokens, self.model.config.vocab_size, machine_memory_bytes())
        if refusal:
            raise UsageError(refusal)

    def _say_cpu_cost(self) -> None:
        """The fit is on the CPU and its step costs seconds by the FLOP count: say so before it starts
        (andrea_lab.fit.cpu_cost)."""
        trainer, data = self.trainer, self.datamodule
        if not isinstance(trainer.accelerator, CPUAccelerator) or not trainer.is_global_zero:
            return
        tokens = data.batch_size * data.block_size * trainer.accumulate_grad_batches * trainer.world_size
        parameters = sum(p.numel() for p in self.model.parameters())
        note = cpu_step_note(parameters, tokens, trainer.max_steps)
        if note:
            print(note, file=sys.stderr, flush=True)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """``validate`` and ``test`` score a checkpoint; they start no run: no logger (a new ``version_N``
        would be listed by TensorBoard and counted by ``andrea compare``) and no saved config. The held-out
        record goes into the run the checkpoint belongs to (andrea_lab.fit.heldout)."""
        if self.subcommand in EVALUATIONS:
            kwargs["logger"] = False
            self.save_config_callback = None
        return super().instantiate_trainer(**kwargs)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        """The Trainer, built from the user's ``trainer.*`` arguments: what it refuses while being built
        (``MisconfigurationException``, and the ``ValueError`` of an unknown accelerator, strategy or
        precision) is a bad argument, reported as one line with exit status 2. Errors after this point
        keep their traceback: they are not the arguments' fault."""
        subcommand = self.config.get("subcommand")
        if subcommand and self.config[subcommand].get("ckpt_path"):
            # Resuming into the run's own directory (andrea fit --resume, a sweep) rewrites its config.yaml.
            self.save_config_kwargs = {**self.save_config_kwargs, "overwrite": True}
        callbacks = [*callbacks, *_plain_progress_bar(config, callbacks)]
        try:
            trainer = super()._instantiate_trainer(config, callbacks)
        except (MisconfigurationException, ValueError) as exc:
            raise UsageError(f"invalid trainer argument: {exc}") from None
        require_safe_checkpoint_io(trainer)
        return trainer

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's run, with a fit stopped by SIGTERM/SIGUSR1 turned into :class:`PreemptedError`
        (exit status 4) whose message is the command that resumes it; a fit that fails before writing into the
        run directory it created removes it (andrea_lab.runs.claim.remove_if_unused)."""
        failed = True
        try:
            super()._run_subcommand(subcommand)
            failed = False
        except SIGTERMException:
            raise PreemptedError(self._preempted_message()) from None
        finally:  # the run directory is free again (a process that dies releases it with its descriptor)
            lock = getattr(self, "_run_lock", None)
            if failed:
                remove_if_unused(getattr(self, "_made_run_dir", None))
            if lock is not None:
                lock.release()

    def _preempted_message(self) -> str:
        callback = next((c for c in self.trainer.callbacks if isinstance(c, PreemptionCheckpoint)), None)
        if callback is None or callback.saved is None:
            return (
                "stopped by SIGTERM before a checkpoint could be written; resume from the run's last "
                "checkpoint with --ckpt_path"
            )
        run_dir = callback.saved.parent.parent
        return (
            f"stopped by {callback.signal_name} after step {callback.step}; checkpoint written: {callback.saved}\n"
            f"resume with: andrea fit --resume {run_dir}\n"
            f"(or the same command as before plus --ckpt_path {callback.saved})"
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("model.config.block_size", "data.block_size")
        parser.link_arguments("model.config.vocab_size", "data.vocab_size")
        parser.add_lightning_class_args(AndreaModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": tags.VAL_LOSS,
                "checkpoint.mode": "min",
                "checkpoint.save_last": True,
                "checkpoint.filename": f"step{{step}}-val{{{tags.VAL_LOSS}:.3f}}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        # On by default; configured as stability.* and summary.* (docs/stability.md).
        parser.add_lightning_class_args(StabilityMonitor, "stability")
        parser.add_lightning_class_args(HeldOutEvaluation, "heldout")
        parser.add_lightning_class_args(RunSummary, "summary")
        # SIGTERM/SIGUSR1: checkpoint at the last completed optimizer step, exit status 4 (docs/performance.md).
        parser.add_lightning_class_args(PreemptionCheckpoint, "preemption")


# ------------------------------------------------------------------------------ argument checks
# Values LightningCLI's types accept but that crash later (a traceback deep in a loop) or are silently
# wrong; each refused with one line naming the key, the value and what is valid (docs/reliability.md).

#: numpy's seed range, which Lightning's seed_everything hands the value to.
MAX_SEED = 2**32 - 1


def install_bounded_yaml() -> None:
    """jsonargparse reads every YAML (``--config``, ``--model.config FILE``, a value) with its own loader;
    wrap it so that an alias bomb or a nesting bomb is a parse error before anything walks the value."""
    import yaml
    from jsonargparse import get_loader, set_loader

    load = get_loader("yaml")
    if not getattr(load, "_andrea_bounded", False):
        bounded = safe_yaml.bounded(load)
        bounded._andrea_bounded = True
        set_loader("yaml", bounded, (yaml.YAMLError,))


def check_arguments(subcommand: str, config: Any) -> None:
    """Every check of the parsed arguments of ``subcommand`` (``fit``, ``validate``, ...)."""
    seed = config.get("seed_everything")
    if is_number(seed) and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise UsageError(
            f"seed_everything must be an integer from 0 to {MAX_SEED} (or true: a random seed, "
            f"false: none), got {seed!r}"
        )
    check_weights_only(config.get("weights_only"))
    check_plain_sections(config)
    check_special_checkpoint(config.get("ckpt_path"))
    check_name_templates(config)
    check_trainer_arguments(config.get("trainer") or {})
    check_logger_arguments((config.get("trainer") or {}).get("logger"))
    model = config.get("model") or {}
    init_from = model.get("init_from") if hasattr(model, "get") else None
    if subcommand in ("validate", "test") and not config.get("ckpt_path") and not init_from:
        raise UsageError(
            f"`andrea {subcommand}` scores a trained model: pass --ckpt_path PATH.ckpt (e.g. "
            "runs/quickstart/version_0/checkpoints/last.ckpt) or --model.init_from PATH.ckpt; "
            "without one it would score random weights"
        )
