"""The three ways of training, each timed by a :class:`StepClock`: (a) ``Trainer.fit`` of AndreaLM, (b) and
(c) a bare PyTorch loop (:class:`BareRunner`), alone or stepped between (a)'s steps."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from andrea_lab.fit.nonfinite import NonFiniteTally, global_grad_norm
from andrea_lab.model.config import AndreaConfig

from .clock import StepClock, bare_batches, make_datamodule
from .machine import PeakMemory, _sync
from .settings import BenchSettings
from .variants import VARIANTS, Ablation, adamw_like_andrea, andrea_lm, hf_gpt2


@dataclass
class RunResult:
    step_s: list[float]
    wait_s: list[float]
    cpu_s: list[float]
    extras: dict[str, float]
    peak_memory_bytes: int | None
    memory_kind: str
    load_average: list[float]
    final_loss: float


def _autocast(device: torch.device, precision: str):
    if precision == "bf16-mixed":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _bare_model(variant: Ablation, settings: BenchSettings, config: AndreaConfig, device: torch.device):
    """(model, optimizer, scheduler, loss function) of a bare-loop variant: (b) Andrea with AndreaLM's own
    ``configure_optimizers``; (c) HF GPT-2 with the same AdamW and the loss Andrea computes."""
    if variant.kind == "bare":
        lm = andrea_lm(config, settings, variant).to(device)
        spec = lm.configure_optimizers()
        model = lm.model
        return model, spec["optimizer"], spec["lr_scheduler"]["scheduler"], lambda x, y: model(x, y)[1]
    model = hf_gpt2(config, variant.hf_activation).to(device)
    optimizer, scheduler = adamw_like_andrea(model, device, settings.warmup + settings.steps, fused=variant.fused)

    def loss_of(x, y):  # cross-entropy of the fp32 logits, as Andrea computes it
        logits = model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.reshape(-1))

    return model, optimizer, scheduler, loss_of


class BareRunner:
    """(b) or (c) in a plain loop: fetch, forward, zero_grad, backward, optimizer step, scheduler
    step; nothing else. ``step()`` runs one step, so runners can be interleaved step by step."""

    def __init__(self, variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device):
        self.variant, self.settings, self.device = VARIANTS[variant], settings, device
        self.clock = StepClock(device)
        torch.manual_seed(settings.seed)
        model, self.optimizer, self.scheduler, self.loss_of = _bare_model(self.variant, settings, config, device)
        if settings.compile or self.variant.compile:
            model.compile()
        model.train()
        self.model = model
        self.loss = torch.zeros((), device=device)
        self.batches = bare_batches(make_datamodule(settings, config), self.clock)

    def step(self) -> None:
        self.clock.step_started()
        x, y = next(self.batches)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with _autocast(self.device, self.settings.precision):
            loss = self.loss_of(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.clock.step_ended()
        self.loss = loss.detach()

    def finish(self, peak: int | None = None, memory_kind: str = "") -> RunResult:
        self.batches.close()
        extras = {}
        if self.variant.times_check:
            extras["nonfinite_check_ms"] = time_nonfinite_check(self.model, self.loss, self.device)
        steps, waits, cpu = self.clock.timed(self.settings.warmup)
        return RunResult(steps, waits, cpu, extras, peak, memory_kind, list(os.getloadavg()), float(self.loss))


def run_bare(variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device) -> RunResult:
    """One bare variant alone for warm-up + timed steps, with its peak memory."""
    with PeakMemory(device) as memory:
        runner = BareRunner(variant, settings, config, device)
        for _ in range(settings.warmup + settings.steps):
            runner.step()
        peak = memory.peak_bytes()
        return runner.finish(peak, memory.kind)


def time_nonfinite_check(model: torch.nn.Module, loss: torch.Tensor, device: torch.device, reps: int = 7) -> float:
    """Milliseconds of what AndreaLM's non-finite guard computes each step (its ``on_before_optimizer_step``:
    the global grad norm, the non-finite flag and its device-side tally; no host sync), timed alone on the
    last step's gradients and waited for; the median."""
    if global_grad_norm(model.parameters()) is None:
        return math.nan
    times, tally = [], NonFiniteTally()
    for step in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        norm = global_grad_norm(model.parameters())
        tally.record(~(torch.isfinite(norm) & torch.isfinite(loss.detach())), step, loss, norm)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _lightning_timers(clock: StepClock, passengers: list[BareRunner]) -> tuple[Any, Any]:
    """A callback that stamps (a)'s step ends and steps the passengers between them, and a profiler that
    times Lightning's own ``train_dataloader_next``."""
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.profilers import Profiler

    class StepEnds(Callback):
        def on_train_start(self, trainer, pl_module):
            clock.step_started()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            clock.step_ended()
            for runner in passengers:
                runner.step()
            clock.step_started()  # everything Lightning does from here on is (a)'s next step

    class FetchTimer(Profiler):
        def start(self, action_name: str) -> None:
            if action_name.endswith("train_dataloader_next"):
                clock.fetch_started()

        def stop(self, action_name: str) -> None:
            if action_name.endswith("train_dataloader_next"):
                clock.fetch_stopped()

    return StepEnds(), FetchTimer()


def _trainer(
    variant: Ablation, settings: BenchSettings, device: torch.device, workdir: Path, step_ends: Any, profiler: Any
):
    """(a)'s Trainer: as andrea fit's, without checkpoints and validation; the variant's logger, bar, callbacks."""
    import lightning as L

    logger: Any = False
    if settings.logger == "tensorboard" and variant.logger:
        from andrea_lab.fit.loggers import AndreaTensorBoardLogger

        logger = AndreaTensorBoardLogger(save_dir=str(workdir / "runs"), name="throughput", default_hp_metric=False)
    callbacks: list[Any] = [step_ends]
    if variant.cli_callbacks:  # the callbacks andrea fit adds by default (andrea_lab/fit/cli.py)
        from andrea_lab.fit import RunSummary, StabilityMonitor

        callbacks = [StabilityMonitor(), RunSummary(), step_ends]
    return L.Trainer(
        accelerator="cuda" if device.type == "cuda" else "cpu",
        devices=[device.index] if device.type == "cuda" and device.index is not None else 1,
        precision=settings.precision,
        max_steps=settings.warmup + settings.steps,
        logger=logger,
        log_every_n_steps=settings.log_every_n_steps,
        enable_checkpointing=False,
        enable_progress_bar=variant.progress_bar,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        gradient_clip_val=variant.clip,
        use_distributed_sampler=False,  # as andrea fit: the data module shards by rank itself
        callbacks=callbacks,
        profiler=profiler,
        default_root_dir=str(workdir),
    )


def run_lightning(
    variant: str,
    settings: BenchSettings,
    config: AndreaConfig,
    device: torch.device,
    workdir: Path,
    passengers: list[BareRunner] = (),
) -> RunResult:
    """(a): ``Trainer.fit`` of AndreaLM with AndreaDataModule; a callback stamps step ends and a
    profiler times Lightning's own ``train_dataloader_next``.

    ``passengers`` (bare runners) each take one step inside the callback after every Lightning
    step, outside (a)'s timed span: (a), (b), (c) then alternate step by step under the same load.
    """
    row, clock = VARIANTS[variant], StepClock(device)
    step_ends, profiler = _lightning_timers(clock, list(passengers))
    with PeakMemory(device) as memory:
        torch.manual_seed(settings.seed)
        lm = andrea_lm(config, settings, row)
        datamodule = make_datamodule(settings, config, num_workers=row.num_workers)
        _trainer(row, settings, device, workdir, step_ends, profiler).fit(lm, datamodule=datamodule)
        peak = None if passengers else memory.peak_bytes()
    steps, waits, cpu = clock.timed(settings.warmup)
    loss = lm.nonfinite.last_loss
    return RunResult(
        steps, waits, cpu, {}, peak, memory.kind, list(os.getloadavg()), float(loss) if loss is not None else math.nan
    )


def run_variant(
    variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device, workdir: Path
) -> RunResult:
    """One variant alone (``--schedule runs``, and the memory pass of ``--schedule steps``)."""
    if VARIANTS[variant].kind == "lightning":
        return run_lightning(variant, settings, config, device, workdir)
    return run_bare(variant, settings, config, device)


def run_interleaved(
    host: str | None,
    passengers: list[str],
    settings: BenchSettings,
    config: AndreaConfig,
    device: torch.device,
    workdir: Path,
) -> dict[str, RunResult]:
    """``host`` (a Lightning variant, or None) and bare ``passengers`` alternating step by step."""
    runners = [BareRunner(name, settings, config, device) for name in passengers]
    results: dict[str, RunResult] = {}
    if host is not None:
        results[host] = run_lightning(host, settings, config, device, workdir, passengers=runners)
    else:
        for _ in range(settings.warmup + settings.steps):
            for runner in runners:
                runner.step()
    for name, runner in zip(passengers, runners):
        results[name] = runner.finish()
    return results
