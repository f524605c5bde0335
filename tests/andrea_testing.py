"""Constants and helpers shared by the tests (a module with a unique name, unlike conftest)."""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger

from andrea_lab.experiments.sweep.executors import Ended
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model import transformer
from andrea_lab.model.config import preset

#: Overrides that turn experiments/quickstart.yaml into a seconds-long CPU run on a small corpus.
MICRO_OVERRIDES = [
    "--model.config.vocab_size",
    "257",
    "--data.tokenizer",
    "byte",
    "--model.config.d_model",
    "64",
    "--model.config.n_layer",
    "2",
    "--model.config.n_head",
    "2",
    "--model.config.block_size",
    "64",
    "--data.batch_size",
    "8",
    "--trainer.limit_val_batches",
    "2",
    "--trainer.num_sanity_val_steps",
    "2",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")


def micro_fit(corpus: Path, *extra: str, steps: int = 1, heldout: tuple[str, ...] = ("--heldout.max_tokens", "1024")):
    """A micro fit of the quickstart config on ``corpus`` (``steps`` steps, the held-out options ``heldout``)
    with ``extra`` arguments: the command line of the hostile tests, which try what a handed value makes it do."""
    return [
        "fit",
        "--config",
        QUICKSTART,
        *MICRO_OVERRIDES,
        *("--data.corpus", str(corpus), "--model.config.d_model", "32", "--model.config.block_size", "32"),
        *("--data.batch_size", "2", "--trainer.limit_val_batches", "1", "--trainer.num_sanity_val_steps", "0"),
        *heldout,
        *("--trainer.max_steps", str(steps)),
        *extra,
    ]


def refused(capsys, code: int, *named: str) -> str:
    """The error of a refused command: exit status 2, no traceback, one ``error:`` line naming ``named``."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    for text in named:
        assert text in lines[0], err
    return lines[0]


def tiny_trainer(log_dir: Optional[Path] = None, name: str = "run", **overrides: Any) -> L.Trainer:
    """The tests' one Trainer: one CPU device, no checkpoints, progress bar or model summary; a TensorBoard
    logger under ``log_dir`` (none without one). ``overrides`` are any other Trainer arguments."""
    logger = TensorBoardLogger(str(log_dir), name=name, default_hp_metric=False) if log_dir is not None else False
    settings = dict(
        accelerator="cpu",
        devices=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return L.Trainer(**{**settings, **overrides})


class NaNAtStep(AndreaLM):
    """The micro AndreaLM (block 32, lr 1e-3, no warmup) whose loss, and so its gradients, is NaN at
    ``bad_steps``; records the steps it trained (``steps_seen``)."""

    def __init__(self, bad_steps=(3,), **kwargs):
        super().__init__(config=preset("andrea-micro", block_size=32), lr=1e-3, warmup_steps=0, **kwargs)
        self.bad_steps = set(bad_steps)
        self.steps_seen: list[int] = []

    def training_step(self, batch, batch_idx):
        self.steps_seen.append(self.global_step)
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.global_step in self.bad_steps else loss


@contextmanager
def within(seconds: int):
    """Fail, instead of hanging, when the block is still working after ``seconds`` (the hostile-file tests: a
    reader that would wait on a FIFO or expand a bomb raises here)."""

    def expire(signum, frame):
        raise TimeoutError(f"still working after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def byte_datamodule(corpus: Path, cache_dir: Path):
    """A byte-tokenized data module over ``corpus``, prepared and set up for fitting: the held-out tests' small
    fixture (block 32, batch 8, 30 % of the documents held out)."""
    from andrea_lab.data.datamodule import AndreaDataModule

    dm = AndreaDataModule(
        corpus=str(corpus),
        tokenizer="byte",
        vocab_size=257,
        block_size=32,
        batch_size=8,
        val_fraction=0.3,
        cache_dir=str(cache_dir),
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


class StandInExecutor:
    """A sweep executor whose "fit" finishes at once: a subclass's ``launch`` writes the start marker, decides
    the run's loss (or its failure) and calls :meth:`finish`. The sweep's runner, grid extension and search see
    finished runs without training anything."""

    name, launched = "stand-in", "started"

    def check_storage(self, directory: Path) -> None:
        pass

    @staticmethod
    def finish(run_dir: Path, loss: float) -> int:
        """The run's summary.json with ``loss`` as its final validation loss; the exit status of a finished fit."""
        summary = {"schema": 1, "status": "finished", "initial_val_loss": 5.0, "final_val_loss": loss}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return 0

    def poll(self, handle):
        return Ended(handle)

    def stop(self, handle) -> None:
        pass

    def kill(self, handle) -> None:
        pass


def finished_scaled_run(suite: str, variant: str, variant_index: int, lr: float, seed: int, loss: float, scale: str,
                        scale_index: int, **columns: Any) -> dict[str, Any]:  # fmt: skip
    """One finished run of a scaled suite as a row of compare's runs table (every RUN_COLUMNS key, the loss as
    its final and held-out loss, the sweep's run path): what constructed tables of compare's tests are made of."""
    from andrea_lab.experiments.compare.runs_table import RUN_COLUMNS  # pandas: only for the tests that build tables

    return {
        **dict.fromkeys(RUN_COLUMNS),
        "suite": suite,
        "variant": variant,
        "variant_index": variant_index,
        "lr": lr,
        "seed": seed,
        "status": "finished",
        "initial_val_loss": 5.5,
        "final_val_loss": loss,
        "heldout_loss": loss,
        "path": f"runs/{suite}/{scale}/{variant}/lr{lr:g}-seed{seed}",
        "scale": scale,
        "scale_index": scale_index,
        **columns,
    }


def attention_input_dtypes(monkeypatch) -> list:
    """The dtype every call of the model's attention computes in from now on (a list it appends to): for
    scaled_dot_product_attention q's, or the CPU autocast's where autocast is on (it casts q down inside the call);
    for the CPU flash kernel's own op (AndreaConfig.cpu_attention_fp32's path) q's, which autocast leaves alone."""
    seen: list = []
    real = F.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else q.dtype)
        return real(q, k, v, **kwargs)

    def recording_flash(q, k, v):  # autocast leaves this op's inputs as they are
        seen.append(q.dtype)
        return real_flash(q, k, v)

    real_flash = transformer.cpu_flash_attention
    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", recording)
    monkeypatch.setattr(transformer, "cpu_flash_attention", recording_flash)
    return seen
