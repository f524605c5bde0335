"""Training throughput of ANDREA: Lightning vs a bare PyTorch loop vs HF GPT-2 of the same shape.

    python benchmarks/throughput.py --preset andrea-tiny
    python benchmarks/throughput.py --preset andrea-small --batch-size 2 --block-size 256 --json small.json
    python benchmarks/throughput.py --preset andrea-120m --device cuda --precision bf16-mixed --compile
    python benchmarks/throughput.py --preset andrea-tiny --threads 1 --ablations a-nocheck,c-gelu   # shared CPU

One run trains the same model, on the same batches, with the same optimizer and precision, three ways:

    (a) lightning  AndreaLM through a real ``Trainer.fit`` (AndreaDataModule, TensorBoard logger to a
                   temporary directory, no checkpoints, no validation, no progress bar)
    (b) bare       the same ``Andrea`` module in a plain PyTorch loop (same data loader, same AdamW
                   built by ``AndreaLM.configure_optimizers``, same warmup+cosine schedule)
    (c) hf         ``transformers.GPT2LMHeadModel`` of identical shape (vocab, n_positions = block size,
                   n_embd, n_layer, n_head, stock ``gelu_new``, SDPA attention, all dropout 0) in
                   the same bare loop, with the same loss (cross-entropy of the fp32 logits)

and prints, for each: tokens/s and ms/step (medians of the timed steps after warm-up), peak memory,
MFU and the fraction of step time spent waiting for the data loader; then the ratios (a)/(b) and
(b)/(c). By default (``--schedule steps``) the three alternate step by step: after each Lightning
step a callback runs one step of (b) and one of (c) -- outside (a)'s timed span -- so a noisy shared
machine slows them alike, step for step; peak memory is then measured in a short run of each
variant alone afterwards. ``--schedule runs`` runs each variant alone instead, in rotating order
per round. Medians pool the timed steps of every round.

Step time is measured identically in every variant: the wall-clock time between the ends of two
consecutive optimizer steps (on CUDA, between CUDA events recorded there, so timing adds no host
sync), so everything the loop does per step counts -- fetching the batch, moving it, forward,
backward, optimizer and scheduler step, and in (a) Lightning's hooks and logging. Data wait is the
time inside ``next()`` on the loader (in (a) Lightning's own ``train_dataloader_next`` profiler
action, read by a tiny profiler). On the CPU the process's CPU time per step is recorded too: on
a shared machine it moves far less than wall-clock time when other processes take the cores.

MFU (model FLOPs utilisation, PaLM appendix B):

    FLOPs/token = 6·N + 12·L·H·Q·T          (= 6·N + 12·n_layer·d_model·T, since H·Q = d_model)
    MFU         = FLOPs/token × tokens/s ÷ matmul peak

* ``6·N``: each weight that takes part in a matmul costs 2 FLOPs per token forward and 4 backward.
  N = every stored parameter except the position table: the tied token embedding is counted once,
  because it does one matmul per token (the output head) while the input lookup is free; the
  position embeddings are only added, never multiplied. Biases and LayerNorm gains are included
  (< 1 % of N); they are what "all parameters" means in 6·N. Kaplan's non-embedding N would leave
  out the output head, which is 15 % of andrea-small's matmul work and more than half of andrea-tiny's.
* ``12·L·H·Q·T``: attention scores QKᵀ and the weighted sum AV are 2·2·T·d FLOPs per token per
  layer forward, ×3 with backward. Like PaLM we count all T keys although a causal mask needs
  only about half of them, so this is the conventional (not the minimal) count.
* The peak is measured in the same run, on the same device and dtype (fp32 for 32-true, bf16 for
  bf16-mixed): the best median rate of square ``torch.mm`` over a few sizes, measured once per
  round between the variants; MFU uses the median over rounds.

``--json PATH`` writes every figure, the per-step times and the machine (CPU model, cores, torch
version, device, date, load average). ``--ablations`` adds variants that isolate one cost each
(see ``ABLATIONS``), to measure what a change to andrea_lab/ would gain.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import importlib.util
import json
import logging
import math
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from andrea_lab.config import PRESETS, AndreaConfig, preset

# ----------------------------------------------------------------------------------- settings

#: Batch size and block size when not given: one CPU step of tiny/small takes about a second or
#: a few seconds on 2 cores (so tiny + small finish in a few minutes); on CUDA the experiment's.
CPU_DEFAULTS = {
    "andrea-micro": (8, 64),
    "andrea-tiny": (8, 128),
    "andrea-small": (2, 256),
    "andrea-120m": (1, 256),
}
CUDA_DEFAULT_BATCH = 16

VARIANT_LABELS = {
    "lightning": "(a) AndreaLM + Lightning Trainer",
    "bare": "(b) Andrea, bare PyTorch loop",
    "hf": "(c) HF GPT2LMHeadModel, bare loop",
}

#: Extra variants (``--ablations a,b,...``). Each changes exactly one thing against (a), (b) or (c).
ABLATIONS = {
    "a-nocheck": ("lightning", "(a) without AndreaLM's grad-norm + non-finite check (no host sync)"),
    "a-nolog": ("lightning", "(a) without any self.log in the training step"),
    "a-progbar": ("lightning", "(a) with Lightning's TQDM progress bar (andrea fit's default)"),
    "a-cli": ("lightning", "(a) as andrea fit runs it: + StabilityMonitor, RunSummary and the progress bar"),
    "a-nologger": ("lightning", "(a) with logger=False (self.log still collects, nothing is written)"),
    "a-unfused": ("lightning", "(a) with the unfused (foreach) AdamW and so a per-step non-finite host check"),
    "a-workers": ("lightning", "(a) with DataLoader num_workers=1 (+ persistent workers)"),
    "b-unfused": ("bare", "(b) with the unfused (foreach) AdamW"),
    "b-copy": ("bare", "(b) again, unchanged: an A/A control of the method's noise and position bias"),
    "c-gelu": ("hf", "(c) with activation_function='gelu_pytorch_tanh' (fused GELU kernel)"),
    "b-compile": ("bare", "(b) with torch.compile of the model (what model.compile=true does in (a))"),
    "c-compile": ("hf", "(c) with torch.compile of the model"),
}

SHORT_LABELS = {
    "lightning": "(a) AndreaLM + Lightning Trainer",
    "bare": "(b) Andrea, bare loop",
    "hf": "(c) HF GPT2LMHeadModel, bare loop",
    "a-nocheck": "(a) - grad-norm/non-finite check",
    "a-nolog": "(a) - self.log in the step",
    "a-progbar": "(a) + progress bar",
    "a-nologger": "(a) - TensorBoard logger",
    "a-cli": "(a) + andrea fit's callbacks, progress bar",
    "a-unfused": "(a) with foreach AdamW",
    "a-workers": "(a) + num_workers=1",
    "b-unfused": "(b) with foreach AdamW",
    "b-copy": "(b) again (A/A control)",
    "c-gelu": "(c) + gelu_pytorch_tanh",
    "b-compile": "(b) + torch.compile",
    "c-compile": "(c) + torch.compile",
}

#: The targets of the issue, checked against this run where they apply.
TARGETS = {
    "lightning_over_bare": 0.97,  # CPU, tiny and a mid-sized preset
    "bare_over_hf": 1.2,  # CPU, mid-sized preset
    "cpu_fp32_mfu": 0.35,  # CPU fp32, d_model >= 512
    "cuda_bf16_mfu": 0.45,  # H100/H200, andrea-120m, bf16-mixed, compile
}

ADAMW_HPARAMS = dict(lr=6e-4, warmup_steps=100, min_lr_ratio=0.1, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)


@dataclass
class BenchSettings:
    preset: str
    batch_size: int
    block_size: int
    steps: int
    warmup: int
    rounds: int
    device: str
    precision: str
    compile: bool
    num_workers: int
    logger: str
    log_every_n_steps: int
    corpus: str
    seed: int
    variants: list[str]
    ablations: list[str] = field(default_factory=list)
    schedule: str = "steps"
    memory_pass: bool = True


# ------------------------------------------------------------------------------------ FLOPs


def parameter_counts(config: AndreaConfig) -> dict[str, int]:
    """Parameters of ANDREA by role, from the config alone (the tied embedding stored once)."""
    d, L, V, T, h = config.d_model, config.n_layer, config.vocab_size, config.block_size, config.mlp_hidden
    gated = 2 if _is_gated(config) else 1
    b = 1 if config.bias else 0
    layer_norm = d + b * d
    attention = (d * 3 * d + b * 3 * d) + (d * d + b * d)
    mlp = (d * gated * h + b * gated * h) + (h * d + b * d)
    per_layer = 2 * layer_norm + attention + mlp
    final_norm = layer_norm if _has_final_norm(config) else 0
    counts = {
        "token_embedding": V * d,  # = the output head (tied)
        "position_embedding": T * d,
        "blocks": L * per_layer,
        "final_norm": final_norm,
    }
    counts["total"] = sum(counts.values())
    counts["matmul"] = counts["total"] - counts["position_embedding"]  # N in 6·N
    counts["non_embedding"] = counts["blocks"] + counts["final_norm"]  # Kaplan et al.'s N (for reference)
    return counts


def _is_gated(config: AndreaConfig) -> bool:
    from andrea_lab.registry import resolve

    return bool(resolve("activation", config.activation).gated)


def _has_final_norm(config: AndreaConfig) -> bool:
    from andrea_lab.registry import resolve

    return bool(resolve("norm_placement", config.norm_placement).final_norm)


def flops_per_token(config: AndreaConfig, seq_len: int | None = None) -> dict[str, Any]:
    """Training FLOPs per token, PaLM's convention: ``6·N + 12·L·H·Q·T`` (see the module docstring)."""
    T = config.block_size if seq_len is None else seq_len
    counts = parameter_counts(config)
    dense = 6 * counts["matmul"]
    attention = 12 * config.n_layer * config.n_head * config.head_size * T
    return {
        "formula": "6*N + 12*n_layer*n_head*head_size*T  (PaLM appendix B; N = all parameters except the "
        "position table, tied embedding once; attention counted over all T keys, not T/2)",
        "N": counts["matmul"],
        "parameters": counts,
        "seq_len": T,
        "dense": dense,
        "attention": attention,
        "total": dense + attention,
    }


# ------------------------------------------------------------------------ machine and memory


def machine_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                                                   "GOMP_SPINCOUNT", "KMP_BLOCKTIME") if k in os.environ},
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": _version("lightning"),
        "transformers": _version("transformers"),
        "device": str(device),
        "device_name": _cpu_model(),
        "load_average_start": list(os.getloadavg()),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
        info["gpu_count"] = torch.cuda.device_count()
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


class PeakMemory:
    """Peak memory of one variant: CUDA ``max_memory_allocated``; on the CPU, the peak RSS over the
    RSS at the start (Linux: the high-water mark VmHWM, reset through /proc/self/clear_refs; else
    ``ru_maxrss``, which can only grow and so reads 0 when an earlier variant peaked higher)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind = ""
        self.start_bytes = 0

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        _malloc_trim()  # hand freed heap pages back, so the next variant's pages count again
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.kind = "cuda max_memory_allocated"
            return self
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.start_bytes = _proc_status_kb("VmRSS") * 1024
            self.kind = "cpu peak RSS - RSS at start (VmHWM)"
        except OSError:
            self.start_bytes = _ru_maxrss_bytes()
            self.kind = "cpu ru_maxrss growth"
        return self

    def __exit__(self, *exc) -> None:
        return None

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if "VmHWM" in self.kind:
            return max(0, _proc_status_kb("VmHWM") * 1024 - self.start_bytes)
        return max(0, _ru_maxrss_bytes() - self.start_bytes)


def _malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _proc_status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise OSError(f"{key} not in /proc/self/status")


def _ru_maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_peak(device: torch.device, dtype: torch.dtype, budget_s: float = 2.0) -> dict[str, Any]:
    """The best median rate of square ``torch.mm`` over a few sizes (FLOP/s), on this device and dtype."""
    sizes = (4096, 8192) if device.type == "cuda" else (512, 1024, 2048)
    rates, cpu_rates = {}, {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)  # warm-up (and library initialisation)
        _sync(device)
        if rates and time.perf_counter() - t0 > budget_s / 4:
            break  # a slow path (e.g. bf16 on a CPU without bf16 units): the smaller sizes must do
        times: list[float] = []
        cpu_times: list[float] = []
        deadline = time.perf_counter() + budget_s / len(sizes)
        while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
            c0 = time.process_time()
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.mm(a, b, out=out)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                torch.mm(a, b, out=out)
                times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        rates[n] = 2 * n**3 / statistics.median(times)
        cpu_rates[n] = 2 * n**3 / max(statistics.median(cpu_times), 1e-9)
        del a, b, out
    best = max(rates, key=rates.get)
    return {"flops_per_s": rates[best], "size": best, "by_size": {str(k): v for k, v in rates.items()},
            "flops_per_cpu_s": max(cpu_rates.values()),
            "load_average": list(os.getloadavg())}


# ------------------------------------------------------------------------------ the clock


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
        return steps, self.waits[warmup:len(self.ends)], cpu


# ------------------------------------------------------------------------------- the data


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


# ----------------------------------------------------------------------------- the models


def andrea_lm(config: AndreaConfig, settings: BenchSettings, variant: str = "lightning"):
    """AndreaLM with the benchmark's hyperparameters (or the ablation's subclass of it)."""
    from andrea_lab.module import AndreaLM

    cls = _ablation_module_class(variant, AndreaLM)
    return cls(config=config, decay_steps=settings.warmup + settings.steps, compile=settings.compile,
               **ADAMW_HPARAMS)


def _ablation_module_class(variant: str, base: type) -> type:
    if variant == "a-nocheck":
        class NoCheck(base):  # type: ignore[misc, valid-type]
            def on_before_optimizer_step(self, optimizer):  # no grad norm, no host sync
                return None
        return NoCheck
    if variant == "a-nolog":
        class NoLog(base):  # type: ignore[misc, valid-type]
            def training_step(self, batch, batch_idx):
                x, y = batch
                _, loss = self.model(x, y)
                self._last_train_loss = loss.detach()
                return loss

            def log(self, *args, **kwargs):  # the grad-norm log in on_before_optimizer_step too
                return None
        return NoLog
    if variant == "a-unfused":
        class Unfused(base):  # type: ignore[misc, valid-type]
            use_fused_adamw = False
        return Unfused
    return base


def adamw_like_andrea(model: torch.nn.Module, device: torch.device, decay_steps: int, fused: bool = True):
    """What ``AndreaLM.configure_optimizers`` builds, for any model: AdamW with weight decay on the
    parameters of dim >= 2 only, fused wherever torch has the kernel, and the warmup + cosine LambdaLR."""
    from andrea_lab.module import fused_adamw, warmup_cosine

    hp = ADAMW_HPARAMS
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = fused_adamw(
        [{"params": decay, "weight_decay": hp["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], fused=fused,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, hp["warmup_steps"], decay_steps, hp["min_lr_ratio"]))
    return optimizer, scheduler


def _gpt2_shaped(config: AndreaConfig) -> bool:
    """Pre-norm, tanh GELU, biases: GPT-2's function. Plugin names are compared by what they select
    (``pre`` and ``andrea-lab:pre`` are one placement), through the export's own check."""
    from andrea_lab.builtin.activations import GELU
    from andrea_lab.interop.gpt2_config import unexportable_fields

    return not unexportable_fields(config) and config.components().activation is GELU


def hf_gpt2(config: AndreaConfig, activation: str = "gelu_new"):
    """``GPT2LMHeadModel`` of ANDREA's shape, SDPA attention, every dropout 0, built from a config
    (no weights are downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if not _gpt2_shaped(config):
        raise ValueError("HF GPT-2 has ANDREA's shape only for the spec's pre-norm, GELU, biased blocks")
    hf_config = GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.d_model,
        n_layer=config.n_layer, n_head=config.n_head, n_inner=config.mlp_hidden,
        activation_function=activation, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=config.layer_norm_eps, initializer_range=config.init_std,
        tie_word_embeddings=True, use_cache=False, bos_token_id=None, eos_token_id=None,
    )
    return GPT2LMHeadModel._from_config(hf_config, attn_implementation="sdpa")


def transformers_missing() -> str | None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "transformers is not installed (pip install -e '.[bench]')"
    return None


# ------------------------------------------------------------------------------- the runs


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


def _kind(variant: str) -> str:
    return variant if variant in VARIANT_LABELS else ABLATIONS[variant][0]


class BareRunner:
    """(b) or (c) in a plain loop: fetch, forward, zero_grad, backward, optimizer step, scheduler
    step; nothing else. ``step()`` runs one step, so runners can be interleaved step by step."""

    def __init__(self, variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device):
        self.variant, self.settings, self.device = variant, settings, device
        self.clock = StepClock(device)
        total = settings.warmup + settings.steps
        torch.manual_seed(settings.seed)
        if _kind(variant) == "bare":
            lm = andrea_lm(config, settings).to(device)  # for its configure_optimizers: the same AdamW
            model = lm.model
            if variant == "b-unfused":
                self.optimizer, self.scheduler = adamw_like_andrea(model, device, total, fused=False)
            else:
                spec = lm.configure_optimizers()
                self.optimizer, self.scheduler = spec["optimizer"], spec["lr_scheduler"]["scheduler"]

            def loss_of(x, y):
                return model(x, y)[1]
        else:
            model = hf_gpt2(config, "gelu_pytorch_tanh" if variant == "c-gelu" else "gelu_new").to(device)
            self.optimizer, self.scheduler = adamw_like_andrea(model, device, total)

            def loss_of(x, y):  # the loss Andrea computes: cross-entropy of the fp32 logits
                logits = model(input_ids=x, use_cache=False).logits
                return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.reshape(-1))
        if settings.compile or variant in ("b-compile", "c-compile"):
            model.compile()
        model.train()
        self.model, self.loss_of = model, loss_of
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
        if self.variant == "bare":
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
    """Milliseconds of what ``AndreaLM.on_before_optimizer_step`` computes each step (the global grad
    norm, the non-finite flag and its device-side tally; no host sync), timed alone on the last step's
    gradients and waited for; the median."""
    from andrea_lab.nonfinite import NonFiniteTally

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return math.nan
    times, tally = [], NonFiniteTally()
    for step in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        tally.record(~(torch.isfinite(norm) & torch.isfinite(loss.detach())), step, loss, norm)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run_lightning(variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device,
                  workdir: Path, passengers: list[BareRunner] = ()) -> RunResult:
    """(a): ``Trainer.fit`` of AndreaLM with AndreaDataModule; a callback stamps step ends and a
    profiler times Lightning's own ``train_dataloader_next``.

    ``passengers`` (bare runners) each take one step inside the callback after every Lightning
    step, outside (a)'s timed span: (a), (b), (c) then alternate step by step under the same load.
    """
    import lightning as L
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.profilers import Profiler

    clock = StepClock(device)

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

    logger: Any = False
    if settings.logger == "tensorboard" and variant != "a-nologger":
        from andrea_lab.loggers import AndreaTensorBoardLogger

        logger = AndreaTensorBoardLogger(save_dir=str(workdir / "runs"), name="throughput", default_hp_metric=False)
    callbacks: list[Any] = [StepEnds()]
    if variant == "a-cli":  # the callbacks andrea fit adds by default (andrea_lab/lightning_cli.py)
        from andrea_lab.callbacks import RunSummary, StabilityMonitor

        callbacks = [StabilityMonitor(), RunSummary(), StepEnds()]
    with PeakMemory(device) as memory:
        torch.manual_seed(settings.seed)
        lm = andrea_lm(config, settings, variant)
        datamodule = make_datamodule(settings, config, num_workers=1 if variant == "a-workers" else None)
        trainer = L.Trainer(
            accelerator="cuda" if device.type == "cuda" else "cpu",
            devices=[device.index] if device.type == "cuda" and device.index is not None else 1,
            precision=settings.precision,
            max_steps=settings.warmup + settings.steps,
            logger=logger,
            log_every_n_steps=settings.log_every_n_steps,
            enable_checkpointing=False,
            enable_progress_bar=variant in ("a-progbar", "a-cli"),
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            use_distributed_sampler=False,  # as andrea fit: the data module shards by rank itself
            callbacks=callbacks,
            profiler=FetchTimer(),
            default_root_dir=str(workdir),
        )
        trainer.fit(lm, datamodule=datamodule)
        peak = None if passengers else memory.peak_bytes()
    steps, waits, cpu = clock.timed(settings.warmup)
    loss = lm._last_train_loss
    return RunResult(steps, waits, cpu, {}, peak, memory.kind, list(os.getloadavg()),
                     float(loss) if loss is not None else math.nan)


def run_variant(variant: str, settings: BenchSettings, config: AndreaConfig, device: torch.device,
                workdir: Path) -> RunResult:
    """One variant alone (``--schedule runs``, and the memory pass of ``--schedule steps``)."""
    if _kind(variant) == "lightning":
        return run_lightning(variant, settings, config, device, workdir)
    return run_bare(variant, settings, config, device)


def run_interleaved(host: str | None, passengers: list[str], settings: BenchSettings, config: AndreaConfig,
                    device: torch.device, workdir: Path) -> dict[str, RunResult]:
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


# ------------------------------------------------------------------------------ reporting


def summarize(results: list[RunResult], settings: BenchSettings, flops_token: float, peak_flops: float,
              peak_cpu_flops: float, memory_runs: list[RunResult] = ()) -> dict:
    measured = [r for r in (*results, *memory_runs) if r.peak_memory_bytes is not None]
    memory = [r.peak_memory_bytes for r in measured]
    memory_kind = measured[0].memory_kind if measured else ""
    steps = [s for r in results for s in r.step_s]
    waits = [w for r in results for w in r.wait_s]
    tokens_per_step = settings.batch_size * settings.block_size
    cpu = [c for r in results for c in r.cpu_s]
    median_step = statistics.median(steps)
    tokens_per_s = tokens_per_step / median_step
    return {
        "cpu_ms_per_step": statistics.median(cpu) * 1e3,
        "tokens_per_cpu_s": tokens_per_step / statistics.median(cpu),
        "cpu_share": sum(cpu) / sum(steps),
        "tokens_per_s": tokens_per_s,
        "ms_per_step": median_step * 1e3,
        "ms_per_step_mean": statistics.fmean(steps) * 1e3,
        "ms_per_step_min": min(steps) * 1e3,
        "ms_per_step_max": max(steps) * 1e3,
        "achieved_flops_per_s": tokens_per_s * flops_token,
        "mfu": tokens_per_s * flops_token / peak_flops,
        "mfu_cpu_time": tokens_per_step / statistics.median(cpu) * flops_token / peak_cpu_flops,
        "data_wait_fraction": sum(waits) / sum(steps),
        "data_wait_ms_median": statistics.median(waits) * 1e3,
        # The smallest measurement: a process's first use of a library (Lightning's logger, oneDNN
        # buffers) allocates once, in whichever variant comes first.
        "peak_memory_bytes": min(memory) if memory else None,
        "peak_memory_kind": memory_kind,
        "rounds": [{"tokens_per_s": tokens_per_step / statistics.median(r.step_s),
                    "cpu_ms_per_step": statistics.median(r.cpu_s) * 1e3,
                    "ms_per_step": statistics.median(r.step_s) * 1e3,
                    "peak_memory_bytes": r.peak_memory_bytes, "final_loss": r.final_loss,
                    "load_average_end": r.load_average} for r in results],
        **{key: statistics.median(r.extras[key] for r in results) for key in results[0].extras},
        "step_ms": [s * 1e3 for s in steps],
        "cpu_step_ms": [c * 1e3 for c in cpu],
        "data_wait_ms": [w * 1e3 for w in waits],
    }


def pair_ratio(top: list[RunResult], bottom: list[RunResult]) -> dict:
    """tokens/s of ``top`` over ``bottom`` (= step time of bottom / step time of top), from pooled
    medians, per round, from CPU time, and as the median of step-by-step ratios (paired when the
    two ran interleaved)."""
    med = statistics.median
    per_round = [med(b.step_s) / med(t.step_s) for t, b in zip(top, bottom)]
    per_step = [bs / ts for t, b in zip(top, bottom) for ts, bs in zip(t.step_s, b.step_s)]
    return {
        "pooled_median": med([x for b in bottom for x in b.step_s]) / med([x for t in top for x in t.step_s]),
        "cpu_time": med([x for b in bottom for x in b.cpu_s]) / med([x for t in top for x in t.cpu_s]),
        "per_round": per_round,
        "median_of_rounds": med(per_round),
        "paired_steps": med(per_step),
    }


def _double_ratio(num: dict, den: dict) -> dict:
    """(x / reference in x's run) / (baseline / reference in the baseline's run), key by key."""
    out = {key: num[key] / den[key] for key in ("pooled_median", "cpu_time", "median_of_rounds", "paired_steps")}
    out["per_round"] = [a / b for a, b in zip(num["per_round"], den["per_round"])]
    return out


def evaluate_targets(report: dict) -> list[dict]:
    """The issue's targets that apply to this run's device, precision and model, met or not.

    Judged on wall-clock figures, as the targets are stated; on the CPU the same figure from the
    process's CPU time is given beside it (robust to other processes sharing the cores).
    """
    s, cfg = report["settings"], report["model_config"]
    out = []
    ratios, variants = report["ratios"], report["variants"]
    cpu = s["device"] == "cpu"
    if cpu:
        if ratios.get("lightning_over_bare"):
            r = ratios["lightning_over_bare"]
            out.append({"target": "(a)/(b) >= 0.97 on CPU", "value": r["pooled_median"],
                        "value_cpu_time": r["cpu_time"], "threshold": TARGETS["lightning_over_bare"]})
        if ratios.get("bare_over_hf") and cfg["d_model"] >= 512:
            r = ratios["bare_over_hf"]
            out.append({"target": "(b)/(c) >= 1.2 on CPU, mid-sized preset", "value": r["pooled_median"],
                        "value_cpu_time": r["cpu_time"], "threshold": TARGETS["bare_over_hf"]})
        if s["precision"] == "32-true" and cfg["d_model"] >= 512:
            for name in ("bare", "lightning"):
                if "tokens_per_s" in variants.get(name, {}):
                    out.append({"target": f"CPU fp32 MFU >= 35 % (d_model >= 512), {name}",
                                "value": variants[name]["mfu"], "value_cpu_time": variants[name]["mfu_cpu_time"],
                                "threshold": TARGETS["cpu_fp32_mfu"]})
    elif s["device"].startswith("cuda") and s["precision"] == "bf16-mixed" and s["preset"] == "andrea-120m":
        for name in ("lightning", "bare"):
            if "tokens_per_s" in variants.get(name, {}):
                out.append({"target": f"GPU bf16 MFU >= 45 % (andrea-120m{', compile' if s['compile'] else ''}), {name}",
                            "value": variants[name]["mfu"], "threshold": TARGETS["cuda_bf16_mfu"]})
    for item in out:
        item["met"] = item["value"] >= item["threshold"]
        if "value_cpu_time" in item:
            item["met_cpu_time"] = item["value_cpu_time"] >= item["threshold"]
    return out


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _fmt_flops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.1f} GFLOP/s"


def format_report(report: dict) -> str:
    s, m, fl, cfg = report["settings"], report["machine"], report["flops_per_token"], report["model_config"]
    peak = report["matmul_peak"]
    cpu = s["device"] == "cpu"
    lines = [
        f"ANDREA training throughput -- {s['preset']} (d_model {cfg['d_model']}, {cfg['n_layer']} layers, "
        f"vocab {cfg['vocab_size']}), batch {s['batch_size']} x block {s['block_size']} = "
        f"{report['tokens_per_step']} tokens/step, {s['device']} {s['precision']}{' compile' if s['compile'] else ''}",
        f"machine: {m['device_name']}, {m['cpus_usable']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
        f"{m['date']}; load average {_fmt_load(m['load_average_start'])} at start, "
        f"{_fmt_load(m['load_average_end'])} at end",
        f"{s['rounds']} rounds x ({s['warmup']} warm-up + {s['steps']} timed steps); "
        + ("(a), (b), (c) alternating step by step within each round, peak memory from a separate short run each"
           if s["schedule"] == "steps" else "each variant alone, order rotated each round")
        + "; medians of all timed steps",
        "",
    ]
    head = f"{'variant':<36} {'tokens/s':>9} {'ms/step':>9} {'peak mem':>9} {'MFU':>6} {'data wait':>9}"
    if cpu:
        head += f" {'CPU ms/step':>11} {'MFU (CPU t)':>11}"
    lines.append(head)
    for name, v in report["variants"].items():
        label = SHORT_LABELS.get(name, name)
        if "skipped" in v:
            lines.append(f"{label:<36} skipped: {v['skipped']}")
            continue
        memory = "n/a" if v["peak_memory_bytes"] is None else _fmt_bytes(v["peak_memory_bytes"])
        row = (f"{label:<36} {v['tokens_per_s']:>9,.0f} {v['ms_per_step']:>9,.1f} "
               f"{memory:>9} {v['mfu']:>6.1%} {v['data_wait_fraction']:>9.2%}")
        if cpu:
            row += f" {v['cpu_ms_per_step']:>11,.1f} {v['mfu_cpu_time']:>11.1%}"
        lines.append(row)
    lines.append("")
    lines.append(f"{'ratio of tokens/s':<30} {'wall':>6} {'paired':>7} {'CPU time' if cpu else '':>9}   per round (wall)")
    rows = [("(a)/(b) Lightning / bare", report["ratios"].get("lightning_over_bare")),
            ("(b)/(c) ANDREA / HF GPT-2", report["ratios"].get("bare_over_hf"))]
    rows += [(f"{name} / {ABLATIONS[name][0]}", r) for name, r in report["ratios"].get("ablations", {}).items()]
    for text, r in rows:
        if r:
            rounds = ", ".join(f"{x:.3f}" for x in r["per_round"])
            cpu_col = f"{r['cpu_time']:>9.3f}" if cpu else f"{'':>9}"
            lines.append(f"{text:<30} {r['pooled_median']:>6.3f} {r['paired_steps']:>7.3f} {cpu_col}   {rounds}")
    lines.append("(wall: ratio of the pooled median step times; paired: median of step-by-step ratios; "
                 "Lightning ablations: relative to (a), each through the (b) stepped beside it)")
    lines += [
        "",
        f"FLOPs/token = 6*N + 12*L*H*Q*T = 6*{fl['N']:,} + 12*{cfg['n_layer']}*{cfg['d_model']}*{fl['seq_len']} "
        f"= {fl['total'] / 1e6:,.2f} MFLOP  (PaLM; N = all parameters except the position table, the tied "
        f"embedding once; attention over all T keys)",
        f"MFU = FLOPs/token x tokens/s / matmul peak; peak = {peak['dtype']} torch.mm {peak['size']}^3 in this run, "
        f"median of {len(peak['measurements'])}: {_fmt_flops(peak['flops_per_s'])} "
        f"(range {_fmt_flops(min(peak['measurements']))} .. {_fmt_flops(max(peak['measurements']))})",
    ]
    check = report["variants"].get("bare", {}).get("nonfinite_check_ms")
    if check is not None:
        lines.append(f"AndreaLM's per-step grad-norm + non-finite check, timed alone on (b)'s gradients: {check:.1f} ms "
                     f"= {check / report['variants']['bare']['ms_per_step']:.1%} of (b)'s step")
    if cpu:
        lines.append(f"CPU-time columns: the same per CPU-second of this process (peak {_fmt_flops(peak['flops_per_cpu_s'])} "
                     "per CPU-second), insensitive to other processes taking the cores")
    first = next((v for v in report["variants"].values() if v.get("peak_memory_kind")), None)
    if first:
        lines.append(f"peak memory: {first['peak_memory_kind']}, the smallest measurement")
    for t in report["targets"]:
        line = f"target {t['target']}: {'MET' if t['met'] else 'NOT met'} ({t['value']:.3f} vs {t['threshold']})"
        if "value_cpu_time" in t:
            line += f"; CPU time: {'MET' if t['met_cpu_time'] else 'NOT met'} ({t['value_cpu_time']:.3f})"
        lines.append(line)
    return "\n".join(lines)


def _fmt_load(load: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


# ----------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="andrea-tiny", choices=list(PRESETS))
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"windows per step (default: CPU {CPU_DEFAULTS}, CUDA {CUDA_DEFAULT_BATCH})")
    parser.add_argument("--block-size", type=int, default=None,
                        help="tokens per window, also the model's context (default: CPU as above, CUDA the preset's)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant per round")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps before them (>= 1; with --compile enough to cover compilation)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds, each with fresh models and (a)/(b)/(c) in a rotated order")
    parser.add_argument("--schedule", default="steps", choices=["steps", "runs"],
                        help="steps: (a), (b), (c) alternate step by step (bare steps run between Lightning "
                             "steps, outside their timing), memory measured in a short pass per variant "
                             "afterwards; runs: each variant runs its steps alone, in rotating order")
    parser.add_argument("--no-memory-pass", action="store_true",
                        help="--schedule steps: skip the per-variant memory pass (peak memory then not reported)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the model in every variant")
    parser.add_argument("--variants", default="lightning,bare,hf",
                        help="comma-separated subset of lightning,bare,hf")
    parser.add_argument("--ablations", default="",
                        help="comma-separated extra variants: " + ", ".join(ABLATIONS))
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (AndreaDataModule's default: 0)")
    parser.add_argument("--logger", default="tensorboard", choices=["tensorboard", "none"],
                        help="(a)'s logger: andrea fit's TensorBoard logger (to a temp dir) or none")
    parser.add_argument("--log-every-n-steps", type=int, default=10, help="(a)'s Trainer setting (andrea fit's default)")
    parser.add_argument("--corpus", default="synthetic",
                        help="'synthetic' (random ids in a token file, the default) or any AndreaDataModule corpus")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads for the whole run (default: torch's, = the usable cores)")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--warmup, --steps and --rounds must be >= 1 (a step's time needs the previous step's end)")
    return args


def settings_from_args(args: argparse.Namespace, device: torch.device) -> BenchSettings:
    cpu_batch, cpu_block = CPU_DEFAULTS[args.preset]
    if device.type == "cuda":
        batch, block = CUDA_DEFAULT_BATCH, preset(args.preset).block_size
    else:
        batch, block = cpu_batch, cpu_block
    variants = [v for v in args.variants.split(",") if v]
    ablations = [a for a in args.ablations.split(",") if a]
    for v in variants:
        if v not in VARIANT_LABELS:
            raise SystemExit(f"unknown variant {v!r}; valid: {', '.join(VARIANT_LABELS)}")
    for a in ablations:
        if a not in ABLATIONS:
            raise SystemExit(f"unknown ablation {a!r}; valid: {', '.join(ABLATIONS)}")
    return BenchSettings(
        preset=args.preset, batch_size=args.batch_size or batch, block_size=args.block_size or block,
        steps=args.steps, warmup=args.warmup, rounds=args.rounds, device=str(device), precision=args.precision,
        compile=args.compile, num_workers=args.num_workers, logger=args.logger,
        log_every_n_steps=args.log_every_n_steps, corpus=args.corpus, seed=args.seed, variants=variants,
        ablations=ablations, schedule=args.schedule, memory_pass=not args.no_memory_pass,
    )


def _quiet() -> None:
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*the corpus is pre-tokenized.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*TensorFloat32.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def run(settings: BenchSettings, echo: Callable[[str], None] = print) -> dict:
    device = torch.device(settings.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available here")
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # CUDA events and the peak matmul go to the current device
    _quiet()
    _import_everything()
    machine = machine_info(device)
    load, cores = machine["load_average_start"][0], machine["cpus_usable"] or 1
    if device.type == "cpu" and load > cores and torch.get_num_threads() > 1:
        echo(f"note: load average {load:.1f} on {cores} cores with {torch.get_num_threads()} torch threads: "
             "OpenMP threads that spin-wait on an oversubscribed CPU can slow every op several-fold; "
             "consider --threads 1 (docs/performance.md)")
    config = preset(settings.preset, block_size=settings.block_size)
    fl = flops_per_token(config, settings.block_size)
    dtype = torch.bfloat16 if settings.precision == "bf16-mixed" else torch.float32

    names = list(settings.variants) + list(settings.ablations)
    skipped: dict[str, str] = {}
    for name in names:
        kind = name if name in VARIANT_LABELS else ABLATIONS[name][0]
        if kind == "hf":
            reason = transformers_missing()
            if reason is None and not _gpt2_shaped(config):
                reason = "the preset's architecture is not GPT-2's"
            if reason:
                skipped[name] = reason
        if name == "a-cli" and importlib.util.find_spec("andrea_lab.callbacks") is None:
            skipped[name] = "andrea_lab.callbacks is not available in this checkout"
    active = [n for n in names if n not in skipped]

    results: dict[str, list[RunResult]] = {n: [] for n in active}
    references: dict[str, list[RunResult]] = {}  # (b) stepped alongside each Lightning ablation
    memory_runs: dict[str, list[RunResult]] = {n: [] for n in active}
    peaks: list[dict] = []
    hosts = [n for n in active if _kind(n) == "lightning"]
    bare_names = [n for n in active if _kind(n) != "lightning"]
    with tempfile.TemporaryDirectory(prefix="andrea-throughput-") as tmp:
        workdir = Path(tmp)
        if settings.corpus == "synthetic":
            settings = _with_corpus(settings, write_synthetic_tokens(workdir, config.vocab_size,
                                                                     settings.block_size, settings.seed))
        for r in range(settings.rounds):
            peaks.append(measure_matmul_peak(device, dtype))
            if settings.schedule == "runs":
                for name in _rotated(active, r):
                    result = run_variant(name, settings, config, device, workdir)
                    results[name].append(result)
                    echo(f"round {r + 1}/{settings.rounds} {name:<10} "
                         f"{statistics.median(result.step_s) * 1e3:9.1f} ms/step (load {_fmt_load(result.load_average)})")
                continue
            # Step by step: every Lightning fit carries bare runners that step right after each of
            # its steps -- the main fit all of them, an ablation's fit (b) as its reference.
            main = "lightning" if "lightning" in hosts else (hosts[0] if hosts and not bare_names else None)
            fits = [(main, _rotated(bare_names, r))] + [
                (h, ["bare"] if "bare" in bare_names else []) for h in hosts if h != main]
            for host, passengers in _rotated(fits, r):
                out = run_interleaved(host, passengers, settings, config, device, workdir)
                for name, result in out.items():
                    if host is not None and host != main and name == "bare":
                        references.setdefault(host, []).append(result)
                    else:
                        results[name].append(result)
                if out:
                    echo(f"round {r + 1}/{settings.rounds} " + ", ".join(
                        f"{name} {statistics.median(res.step_s) * 1e3:.1f}" for name, res in out.items())
                        + f" ms/step (load {_fmt_load(os.getloadavg())})")
        peaks.append(measure_matmul_peak(device, dtype))
        if settings.schedule == "steps" and settings.memory_pass:
            short = replace(settings, warmup=1, steps=1)
            for name in active:  # memory alone: interleaved variants share one process's RSS
                memory_runs[name].append(run_variant(name, short, config, device, workdir))
    machine["load_average_end"] = list(os.getloadavg())

    peak_flops = statistics.median(p["flops_per_s"] for p in peaks)
    peak_cpu_flops = statistics.median(p["flops_per_cpu_s"] for p in peaks)
    variants: dict[str, dict] = {}
    for name in names:
        if name in skipped:
            variants[name] = {"skipped": skipped[name]}
        else:
            variants[name] = summarize(results[name], settings, fl["total"], peak_flops, peak_cpu_flops,
                                       memory_runs.get(name, []))
            variants[name]["label"] = VARIANT_LABELS.get(name) or ABLATIONS[name][1]
    ratios: dict[str, Any] = {"lightning_over_bare": None, "bare_over_hf": None, "ablations": {}}
    if results.get("lightning") and results.get("bare"):
        ratios["lightning_over_bare"] = pair_ratio(results["lightning"], results["bare"])
    if results.get("bare") and results.get("hf"):
        ratios["bare_over_hf"] = pair_ratio(results["bare"], results["hf"])
    for name in settings.ablations:
        baseline = ABLATIONS[name][0]
        if name not in results or not results.get(baseline):
            continue
        if settings.schedule == "steps" and _kind(name) == "lightning" and name in references:
            if ratios["lightning_over_bare"]:
                ratios["ablations"][name] = _double_ratio(pair_ratio(results[name], references[name]),
                                                          ratios["lightning_over_bare"])
        else:
            ratios["ablations"][name] = pair_ratio(results[name], results[baseline])
    report = {
        "settings": {**asdict(settings), "corpus": settings.corpus if not settings.corpus.endswith("synthetic.bin")
                     else "synthetic"},
        "model_config": config.to_dict(),
        "machine": machine,
        "flops_per_token": fl,
        "tokens_per_step": settings.batch_size * settings.block_size,
        "matmul_peak": {"dtype": str(dtype).removeprefix("torch."), "flops_per_s": peak_flops,
                        "size": peaks[-1]["size"], "measurements": [p["flops_per_s"] for p in peaks],
                        "flops_per_cpu_s": peak_cpu_flops,
                        "details": peaks},
        "variants": variants,
        "ratios": ratios,
    }
    report["targets"] = evaluate_targets(report)
    return report


def _rotated(items: list, r: int) -> list:
    if not items:
        return []
    k = r % len(items)
    return items[k:] + items[:k]


def _import_everything() -> None:
    """Import what the variants import lazily, so no variant's memory or time pays for first imports."""
    import lightning.pytorch  # noqa: F401
    import andrea_lab.data  # noqa: F401
    import andrea_lab.loggers  # noqa: F401
    import andrea_lab.module  # noqa: F401

    for name in ("tensorboardX", "torch.utils.tensorboard", "transformers.models.gpt2.modeling_gpt2"):
        with contextlib.suppress(ImportError):
            __import__(name)


def _with_corpus(settings: BenchSettings, path: Path) -> BenchSettings:
    return replace(settings, corpus=str(path))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    settings = settings_from_args(args, device)
    report = run(settings)
    print()
    print(format_report(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
