"""Timing one step the same way in every variant (``StepClock``), and the data every variant reads."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from andrea_lab.model.config import AndreaConfig

from .settings import BenchSettings


class StepClock:
    """Stamps the start and end of every optimizer step and the time spent fetching batches.

    Used unchanged by every variant, so (a), (b) and (c) are timed the same way. A bare loop's
    step starts before it fetches its batch; a Lightning step starts when the previous one ended
    (right after any interleaved bare steps), so everything the Trainer does between two steps
    (hooks, logging, fetching) belongs to a step. Data wait is the fetch time inside a step.
    On CUDA the stamps are CUDA events recorded on the stream (read after the run), so timing adds
    no host sync: the loop stays as asynchronous as it is without the benchmark, and a sync that a
    variant does itself (AndreaLM's non-finite check) costs what it costs in a real run.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.starts: list[tuple[float, float, Any]] = []
        self.ends: list[tuple[float, float, Any]] = []
        self.waits: list[float] = []
        self._pending = 0.0
        self._fetch_started: float | None = None

    def _stamp(self) -> tuple[float, float, Any]:
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        return time.perf_counter(), time.process_time(), event

    def step_started(self) -> None:
        self.starts.append(self._stamp())

    def fetch_started(self) -> None:
        self._fetch_started = time.perf_counter()

    def fetch_stopped(self) -> None:
        if self._fetch_started is not None:
            self._pending += time.perf_counter() - self._fetch_started
            self._fetch_started = None

    def step_ended(self) -> None:
        self.ends.append(self._stamp())
        self.waits.append(self._pending)
        self._pending = 0.0

    def timed(self, warmup: int) -> tuple[list[float], list[float], list[float]]:
        """(step seconds, data-wait seconds, CPU seconds of this process) of the steps after ``warmup``."""
        pairs = list(zip(self.starts, self.ends))[warmup:]
        if self.device.type == "cuda" and pairs:
            pairs[-1][1][2].synchronize()
            steps = [start[2].elapsed_time(end[2]) / 1e3 for start, end in pairs]
        else:
            steps = [end[0] - start[0] for start, end in pairs]
        cpu = [end[1] - start[1] for start, end in pairs]
        return steps, self.waits[warmup : len(self.ends)], cpu


def make_datamodule(settings: BenchSettings, config: AndreaConfig, num_workers: int | None = None):
    """A fresh AndreaDataModule over the benchmark's corpus, sized for warm-up + timed steps."""
    from andrea_lab.data import AndreaDataModule

    steps = settings.warmup + settings.steps
    tokenizer = "byte" if config.vocab_size == 257 and settings.corpus != "stdlib" else "bpe"
    return AndreaDataModule(
        corpus=settings.corpus,
        tokenizer=tokenizer,
        batch_size=settings.batch_size,
        block_size=settings.block_size,
        vocab_size=config.vocab_size,
        val_fraction=0.05,
        seed=settings.seed,
        samples_per_epoch=settings.batch_size * (steps + 8),  # one epoch covers the whole run
        max_val_batches=1,
        num_workers=settings.num_workers if num_workers is None else num_workers,
    )


def write_synthetic_tokens(directory: Path, vocab_size: int, block_size: int, seed: int) -> Path:
    """A pre-tokenized llm.c token file of uniform random ids (the speed does not depend on the text)."""
    from andrea_lab.data.token_file import write_token_file

    count = max(1 << 20, 200 * (block_size + 1))
    tokens = np.random.default_rng(seed).integers(0, vocab_size, size=count, dtype=np.int64)
    path = directory / "synthetic.bin"
    write_token_file(path, tokens)
    return path


def bare_batches(datamodule, clock: StepClock) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The datamodule's training loader, its ``next()`` timed by the clock (as Lightning's profiler does)."""
    datamodule.prepare_data()
    datamodule.setup("fit")
    iterator = iter(datamodule.train_dataloader())
    while True:
        clock.fetch_started()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        finally:
            clock.fetch_stopped()
        yield batch
