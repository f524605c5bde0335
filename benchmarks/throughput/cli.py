"""The command line and a whole run: arguments → settings → rounds of the variants → the report."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import tempfile
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from andrea_lab.model.config import PRESETS, AndreaConfig, preset

from . import __doc__ as PACKAGE_DOC
from .clock import write_synthetic_tokens
from .flops import flops_per_token
from .machine import machine_info, measure_matmul_peak
from .report import _double_ratio, _fmt_load, evaluate_targets, format_report, pair_ratio, summarize
from .runners import RunResult, run_interleaved, run_variant
from .settings import CPU_DEFAULTS, CUDA_DEFAULT_BATCH, BenchSettings
from .variants import ABLATIONS, BASE, VARIANTS, hf_unavailable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=PACKAGE_DOC.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="andrea-tiny", choices=list(PRESETS))
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"windows per step (default: CPU {CPU_DEFAULTS}, CUDA {CUDA_DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="tokens per window, also the model's context (default: CPU as above, CUDA the preset's)",
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant per round")
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="untimed steps before them (>= 1; with --compile enough to cover compilation)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds, each with fresh models and (a)/(b)/(c) in a rotated order"
    )
    parser.add_argument(
        "--schedule",
        default="steps",
        choices=["steps", "runs"],
        help="steps: (a), (b), (c) alternate step by step (bare steps run between Lightning "
        "steps, outside their timing), memory measured in a short pass per variant "
        "afterwards; runs: each variant runs its steps alone, in rotating order",
    )
    parser.add_argument(
        "--no-memory-pass",
        action="store_true",
        help="--schedule steps: skip the per-variant memory pass (peak memory then not reported)",
    )
    add_setup_arguments(parser)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--warmup, --steps and --rounds must be >= 1 (a step's time needs the previous step's end)")
    return args


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """What is measured and how it is set up: device, precision, variants, logger, corpus, threads."""
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the model in every variant")
    parser.add_argument("--variants", default="lightning,bare,hf", help="comma-separated subset of lightning,bare,hf")
    parser.add_argument("--ablations", default="", help="comma-separated extra variants: " + ", ".join(ABLATIONS))
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (AndreaDataModule's default: 0)")
    parser.add_argument(
        "--logger",
        default="tensorboard",
        choices=["tensorboard", "none"],
        help="(a)'s logger: andrea fit's TensorBoard logger (to a temp dir) or none",
    )
    parser.add_argument(
        "--log-every-n-steps", type=int, default=10, help="(a)'s Trainer setting (andrea fit's default)"
    )
    parser.add_argument(
        "--corpus",
        default="synthetic",
        help="'synthetic' (random ids in a token file, the default) or any AndreaDataModule corpus",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads for the whole run (default: torch's, = the usable cores)",
    )
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")


def settings_from_args(args: argparse.Namespace, device: torch.device) -> BenchSettings:
    cpu_batch, cpu_block = CPU_DEFAULTS[args.preset]
    if device.type == "cuda":
        batch, block = CUDA_DEFAULT_BATCH, preset(args.preset).block_size
    else:
        batch, block = cpu_batch, cpu_block
    variants = [v for v in args.variants.split(",") if v]
    ablations = [a for a in args.ablations.split(",") if a]
    for v in variants:
        if v not in BASE:
            raise SystemExit(f"unknown variant {v!r}; valid: {', '.join(BASE)}")
    for a in ablations:
        if a not in ABLATIONS:
            raise SystemExit(f"unknown ablation {a!r}; valid: {', '.join(ABLATIONS)}")
    return BenchSettings(
        preset=args.preset,
        batch_size=args.batch_size or batch,
        block_size=args.block_size or block,
        steps=args.steps,
        warmup=args.warmup,
        rounds=args.rounds,
        device=str(device),
        precision=args.precision,
        compile=args.compile,
        num_workers=args.num_workers,
        logger=args.logger,
        log_every_n_steps=args.log_every_n_steps,
        corpus=args.corpus,
        seed=args.seed,
        variants=variants,
        ablations=ablations,
        schedule=args.schedule,
        memory_pass=not args.no_memory_pass,
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


def _prepare(settings: BenchSettings, echo: Callable[[str], None]) -> tuple[torch.device, dict[str, Any]]:
    """The device, checked and made current; quiet libraries, first imports done; the machine described."""
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
        echo(
            f"note: load average {load:.1f} on {cores} cores with {torch.get_num_threads()} torch threads: "
            "OpenMP threads that spin-wait on an oversubscribed CPU can slow every op several-fold; "
            "consider --threads 1 (docs/performance.md)"
        )
    return device, machine


def _skipped(names: list[str], config: AndreaConfig) -> dict[str, str]:
    """The variants that cannot run here, with why: (c) needs transformers and a GPT-2-shaped preset; a row
    that sets an option needs this andrea-lab to have it."""
    skipped = {}
    for name in names:
        if VARIANTS[name].kind == "hf" and (problem := hf_unavailable(config)):
            skipped[name] = problem
        elif problem := VARIANTS[name].unavailable(config):
            skipped[name] = problem
    return skipped


@dataclass
class Measurements:
    """What the rounds measured: per variant, (b) beside each Lightning ablation, memory, matmul peaks."""

    results: dict[str, list[RunResult]]
    references: dict[str, list[RunResult]] = field(default_factory=dict)
    memory_runs: dict[str, list[RunResult]] = field(default_factory=dict)
    peaks: list[dict] = field(default_factory=list)


def _round_alone(
    r: int,
    active: list[str],
    settings: BenchSettings,
    config: AndreaConfig,
    device: torch.device,
    workdir: Path,
    out: Measurements,
    echo: Callable[[str], None],
) -> None:
    """``--schedule runs``: each variant alone, in an order rotated by round."""
    for name in _rotated(active, r):
        result = run_variant(name, settings, config, device, workdir)
        out.results[name].append(result)
        echo(
            f"round {r + 1}/{settings.rounds} {name:<10} "
            f"{statistics.median(result.step_s) * 1e3:9.1f} ms/step (load {_fmt_load(result.load_average)})"
        )


def _round_stepped(
    r: int,
    active: list[str],
    settings: BenchSettings,
    config: AndreaConfig,
    device: torch.device,
    workdir: Path,
    out: Measurements,
    echo: Callable[[str], None],
) -> None:
    """``--schedule steps``: every Lightning fit carries bare runners that step right after each of its
    steps -- the main fit all of them, an ablation's fit (b) as its reference."""
    hosts = [n for n in active if VARIANTS[n].kind == "lightning"]
    bare_names = [n for n in active if VARIANTS[n].kind != "lightning"]
    main = "lightning" if "lightning" in hosts else (hosts[0] if hosts and not bare_names else None)
    fits = [(main, _rotated(bare_names, r))] + [
        (h, ["bare"] if "bare" in bare_names else []) for h in hosts if h != main
    ]
    for host, passengers in _rotated(fits, r):
        results = run_interleaved(host, passengers, settings, config, device, workdir)
        for name, result in results.items():
            if host is not None and host != main and name == "bare":
                out.references.setdefault(host, []).append(result)
            else:
                out.results[name].append(result)
        if results:
            echo(
                f"round {r + 1}/{settings.rounds} "
                + ", ".join(f"{name} {statistics.median(res.step_s) * 1e3:.1f}" for name, res in results.items())
                + f" ms/step (load {_fmt_load(os.getloadavg())})"
            )


def _measure(
    settings: BenchSettings,
    active: list[str],
    config: AndreaConfig,
    device: torch.device,
    dtype: torch.dtype,
    echo: Callable[[str], None],
) -> Measurements:
    """The rounds, with a matmul peak before each and after the last, then the memory pass."""
    out = Measurements({n: [] for n in active}, memory_runs={n: [] for n in active})
    with tempfile.TemporaryDirectory(prefix="andrea-throughput-") as tmp:
        workdir = Path(tmp)
        if settings.corpus == "synthetic":
            settings = _with_corpus(
                settings, write_synthetic_tokens(workdir, config.vocab_size, settings.block_size, settings.seed)
            )
        for r in range(settings.rounds):
            out.peaks.append(measure_matmul_peak(device, dtype))
            one_round = _round_alone if settings.schedule == "runs" else _round_stepped
            one_round(r, active, settings, config, device, workdir, out, echo)
        out.peaks.append(measure_matmul_peak(device, dtype))
        if settings.schedule == "steps" and settings.memory_pass:
            short = replace(settings, warmup=1, steps=1)
            for name in active:  # memory alone: interleaved variants share one process's RSS
                out.memory_runs[name].append(run_variant(name, short, config, device, workdir))
    return out


def _ratios(settings: BenchSettings, m: Measurements) -> dict[str, Any]:
    """(a)/(b), (b)/(c), and each ablation against the variant it changes."""
    results = m.results
    ratios: dict[str, Any] = {"lightning_over_bare": None, "bare_over_hf": None, "ablations": {}}
    if results.get("lightning") and results.get("bare"):
        ratios["lightning_over_bare"] = pair_ratio(results["lightning"], results["bare"])
    if results.get("bare") and results.get("hf"):
        ratios["bare_over_hf"] = pair_ratio(results["bare"], results["hf"])
    for name in settings.ablations:
        baseline = VARIANTS[name].kind
        if name not in results or not results.get(baseline):
            continue
        if settings.schedule == "steps" and baseline == "lightning" and name in m.references:
            if ratios["lightning_over_bare"]:
                ratios["ablations"][name] = _double_ratio(
                    pair_ratio(results[name], m.references[name]), ratios["lightning_over_bare"]
                )
        else:
            ratios["ablations"][name] = pair_ratio(results[name], results[baseline])
    return ratios


def _variant_figures(
    names: list[str], skipped: dict[str, str], settings: BenchSettings, m: Measurements, flops_token: float
) -> dict[str, dict]:
    peak_flops = statistics.median(p["flops_per_s"] for p in m.peaks)
    peak_cpu_flops = statistics.median(p["flops_per_cpu_s"] for p in m.peaks)
    variants: dict[str, dict] = {}
    for name in names:
        if name in skipped:
            variants[name] = {"skipped": skipped[name]}
        else:
            variants[name] = summarize(
                m.results[name], settings, flops_token, peak_flops, peak_cpu_flops, m.memory_runs.get(name, [])
            )
            variants[name]["label"] = VARIANTS[name].label
    return variants


def run(settings: BenchSettings, echo: Callable[[str], None] = print) -> dict:
    device, machine = _prepare(settings, echo)
    config = preset(settings.preset, block_size=settings.block_size)
    fl = flops_per_token(config, settings.block_size)
    dtype = torch.bfloat16 if settings.precision == "bf16-mixed" else torch.float32
    names = list(settings.variants) + list(settings.ablations)
    skipped = _skipped(names, config)
    measured = _measure(settings, [n for n in names if n not in skipped], config, device, dtype, echo)
    machine["load_average_end"] = list(os.getloadavg())
    peaks = measured.peaks
    report = {
        "settings": {
            **asdict(settings),
            "corpus": settings.corpus if not settings.corpus.endswith("synthetic.bin") else "synthetic",
        },
        "model_config": config.to_dict(),
        "machine": machine,
        "flops_per_token": fl,
        "tokens_per_step": settings.batch_size * settings.block_size,
        "matmul_peak": {
            "dtype": str(dtype).removeprefix("torch."),
            "flops_per_s": statistics.median(p["flops_per_s"] for p in peaks),
            "size": peaks[-1]["size"],
            "measurements": [p["flops_per_s"] for p in peaks],
            "flops_per_cpu_s": statistics.median(p["flops_per_cpu_s"] for p in peaks),
            "details": peaks,
        },
        "variants": _variant_figures(names, skipped, settings, measured, fl["total"]),
        "ratios": _ratios(settings, measured),
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
    import andrea_lab.fit.loggers  # noqa: F401
    import andrea_lab.fit.module  # noqa: F401

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
