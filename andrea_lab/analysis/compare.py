"""Comparing runs: read run directories, group them by variant, and reduce each variant to a row.

Reading (:func:`find_runs`, :func:`load_run`) takes the TensorBoard event files through the tensorboard
library's own ``EventAccumulator`` and, where present, ``summary.json`` (written by the StabilityMonitor
at the end of a fit), which wins for the numbers it holds. A run's suite, variant, learning rate and seed
come from the sweep's ``sweep-run.json`` marker, else ``summary.json``/``config.yaml``, else the directory
layout ``<suite>/<variant>/lr<lr>-seed<seed>/`` that ``andrea sweep`` writes.

The arithmetic is in pure functions on plain numbers, tested on hand-made values:

* :func:`capped_loss` — ``min(final, loss at init)``; a diverged (non-finite or missing) final loss counts
  as the loss at init, so one blow-up cannot dominate a mean;
* :func:`lr_sensitivity` — Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer
  training instabilities"): the mean over the LR grid of ``min(loss, loss at init)`` minus the best
  of those values. 0 means every LR of the grid is as good as the best one;
* :func:`mean_std` — mean and sample standard deviation over seeds;
* :func:`verdict` — the no-difference rule: a difference smaller than twice the seed spread (the larger
  of the two variants' standard deviations over seeds) is reported as "no difference".
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import yaml

from andrea_lab.files import read_json
from andrea_lab.rundir import DONE_MARKER, FAILED_MARKER, START_MARKER, SUMMARY_FILE, is_aside
from andrea_lab.sweep.suite import format_lr, parse_run_version

VAL_TAG = "val/loss"
TRAIN_TAG = "train/loss"
GRAD_TAG = "train/grad_norm"
LAYER_GRAD_PREFIX = "stability/grad_norm/"
DELTA_RATIO_PREFIX = "stability/delta_ratio/"
#: Run statuses that count in the statistics; the others (interrupted, failed, incomplete) are listed only.
COUNTED_STATUSES = ("finished", "diverged", "unknown")
#: "LRs within this many nats of the best" (a column of the table).
NEAR_BEST_NATS = 0.1
#: Fallback spike rule (when there is no summary.json): a logged training loss more than SPIKE_NATS above
#: the median of the previous SPIKE_WINDOW logged values; consecutive ones count once.
SPIKE_WINDOW = 10
SPIKE_NATS = 0.5

Curve = list[tuple[int, float]]


# ====================================================================== arithmetic (pure)


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


def capped_loss(final: Optional[float], initial: float) -> float:
    """``min(final, initial)``; a missing or non-finite final loss (a diverged run) counts as ``initial``."""
    if not _finite(final):
        return initial
    return min(final, initial)


def lr_sensitivity(finals: Sequence[Optional[float]], initials: Sequence[float] | float) -> float:
    """Wortsman et al. 2023: ``mean_lr min(final, init) - min_lr min(final, init)`` over one LR grid.

    ``finals[i]`` is the final loss at the i-th learning rate, ``initials`` the loss at init (one value,
    or one per learning rate).
    """
    if not finals:
        raise ValueError("lr_sensitivity needs at least one learning rate")
    if isinstance(initials, (int, float)):
        initials = [float(initials)] * len(finals)
    if len(initials) != len(finals):
        raise ValueError(f"{len(finals)} final losses but {len(initials)} initial losses")
    capped = [capped_loss(final, initial) for final, initial in zip(finals, initials)]
    return statistics.fmean(capped) - min(capped)


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n-1); std is NaN for fewer than two values, both for none."""
    values = list(values)
    if not values:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) >= 2 else math.nan
    return mean, std


def best_key(values: Mapping[float, float]) -> float:
    """The key (learning rate) of the smallest value; ties go to the smaller key."""
    return min(sorted(values), key=lambda key: values[key])


def count_within(values: Iterable[float], best: float, tolerance: float = NEAR_BEST_NATS) -> int:
    """How many values are within ``tolerance`` of ``best`` (the best itself included)."""
    return sum(1 for value in values if value - best <= tolerance + 1e-12)


def verdict(mean: float, std: float, best_mean: float, best_std: float, digits: int = 3) -> str:
    """Compare a variant with the best one (lower is better) by the no-difference rule.

    The difference is "no difference" when it is smaller than twice the seed spread, the larger of the
    two standard deviations over seeds; otherwise "worse by X" (or "better by X").
    """
    diff = mean - best_mean
    if not (math.isfinite(mean) and math.isfinite(best_mean)):
        return "n/a"
    spread = max(std, best_std) if math.isfinite(std) and math.isfinite(best_std) else math.nan
    direction = "worse" if diff > 0 else "better"
    if not math.isfinite(spread):
        return f"{direction} by {abs(diff):.{digits}f} (seed spread unknown)"
    if abs(diff) < 2 * spread:
        return "no difference"
    return f"{direction} by {abs(diff):.{digits}f}"


def count_spikes(values: Sequence[float], window: int = SPIKE_WINDOW, nats: float = SPIKE_NATS) -> int:
    """Loss spikes in a training-loss curve: points more than ``nats`` above the median of the previous
    ``window`` finite points; a run of consecutive such points is one spike. Non-finite points are skipped
    (they are a divergence, not a spike)."""
    spikes, in_spike, history = 0, False, []
    for value in values:
        if not math.isfinite(value):
            continue
        if len(history) >= window and value > statistics.median(history[-window:]) + nats:
            if not in_spike:
                spikes += 1
            in_spike = True
        else:
            in_spike = False
        history.append(value)
    return spikes


# ====================================================================== reading runs


@dataclass
class RunRecord:
    """What the comparison needs from one run directory."""

    path: Path
    suite: str
    variant: str
    lr: Optional[float]
    seed: Optional[int]
    status: str
    initial_val_loss: Optional[float] = None
    final_val_loss: Optional[float] = None
    best_val_loss: Optional[float] = None
    divergence_step: Optional[int] = None
    divergence_kind: Optional[str] = None
    grad_norm_median: Optional[float] = None
    grad_norm_max: Optional[float] = None
    spike_count: int = 0
    steps: Optional[int] = None
    wall_time_s: Optional[float] = None
    vocab_size: Optional[int] = None
    val_curve: Curve = field(default_factory=list)
    train_curve: Curve = field(default_factory=list)
    init_grad_norms: dict[str, float] = field(default_factory=dict)
    #: ‖sublayer output‖/‖stream it is added to‖ at step 0, by ``block_XX_attn`` / ``block_XX_mlp``.
    init_delta_ratios: dict[str, float] = field(default_factory=dict)
    source: str = "events"
    order: Optional[int] = None  # the variant's position in its suite (from sweep-run.json)

    @property
    def counted(self) -> bool:
        return self.status in COUNTED_STATUSES

    @property
    def diverged(self) -> bool:
        return self.status == "diverged"

    @property
    def scored_loss(self) -> Optional[float]:
        """The final val loss as the comparison scores it: none (so: the loss at init) when the run blew
        up (non-finite), since its last validation may predate the blow-up."""
        return None if self.divergence_kind == "nonfinite" else self.final_val_loss

    @property
    def loss_at_init(self) -> Optional[float]:
        """The val loss at step 0, else ln(vocab_size) (what an untrained model scores)."""
        if _finite(self.initial_val_loss):
            return self.initial_val_loss
        return math.log(self.vocab_size) if self.vocab_size else None


def _is_run_dir(names: Iterable[str]) -> bool:
    return any(name.startswith("events.out.tfevents.") or name in (SUMMARY_FILE, START_MARKER) for name in names)


def find_runs(root: str | Path) -> list[Path]:
    """Every run directory under ``root`` (``root`` itself included), skipping directories the sweep
    moved aside (``*.interrupted-*``, ``*.failed-*``)."""
    root = Path(root)
    found = []
    for directory, subdirs, files in os.walk(root):
        path = Path(directory)
        if is_aside(path):
            subdirs[:] = []
            continue
        if _is_run_dir(files):
            found.append(path)
            subdirs[:] = []  # checkpoints/ and the like
        else:
            subdirs[:] = sorted(d for d in subdirs if not is_aside(Path(d)))
    return sorted(found)


def read_scalars(run_dir: Path) -> dict[str, Curve]:
    """Every scalar tag of a run's event files, as ``(step, value)`` sorted by step (the last value
    logged at a step wins)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    curves = {}
    for tag in accumulator.Tags().get("scalars", []):
        by_step = {event.step: float(event.value) for event in accumulator.Scalars(tag)}
        curves[tag] = sorted(by_step.items())
    return curves


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _dig(mapping: dict, *keys):
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def _layout_identity(run_dir: Path, root: Path) -> tuple[str, str]:
    """(suite, variant) from ``<suite>/<variant>/<version>`` relative to the directory compared."""
    try:
        parts = run_dir.resolve().relative_to(root.resolve()).parts
    except ValueError:
        parts = ()
    if len(parts) >= 3:
        return parts[-3], parts[-2]
    if len(parts) == 2:
        return root.resolve().name, parts[0]
    if len(parts) == 1:
        return root.resolve().parent.name, root.resolve().name
    return run_dir.resolve().parent.parent.name, run_dir.resolve().parent.name


def _number(value) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _first_nonfinite(*curves: Curve) -> Optional[int]:
    steps = [step for curve in curves for step, value in curve if not math.isfinite(value)]
    return min(steps) if steps else None


def load_run(run_dir: str | Path, root: str | Path | None = None) -> RunRecord:
    """Read one run directory (events, and summary.json / sweep markers / config.yaml where present)."""
    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir.parent.parent
    start = read_json(run_dir / START_MARKER) or {}
    summary = read_json(run_dir / SUMMARY_FILE)
    config = _read_yaml(run_dir / "config.yaml")
    from_name = parse_run_version(run_dir.name)

    suite, variant = _layout_identity(run_dir, root)
    suite = start.get("suite") or suite
    variant = start.get("variant") or variant
    lr = _number(start.get("lr"))
    if lr is None and summary:
        lr = _number(summary.get("lr"))
    if lr is None:
        lr = _number(_dig(config, "model", "lr"))
    if lr is None and from_name:
        lr = from_name[0]
    seed = start.get("seed")
    if seed is None and summary:
        seed = summary.get("seed")
    if seed is None:
        seed = _dig(config, "seed_everything")
    if (seed is None or isinstance(seed, bool)) and from_name:
        seed = from_name[1]
    seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    vocab = _dig(config, "model", "config", "vocab_size") or _dig(summary or {}, "config", "vocab_size")

    if summary is not None:
        status = summary.get("status") or "unknown"
    elif (run_dir / DONE_MARKER).exists():
        status = (read_json(run_dir / DONE_MARKER) or {}).get("status") or "finished"
    elif (run_dir / FAILED_MARKER).exists():
        status = "failed"
    elif start:
        status = "incomplete"
    else:
        status = "unknown"  # a run from plain `andrea fit`: nothing says whether it completed

    record = RunRecord(path=run_dir, suite=str(suite), variant=str(variant), lr=lr, seed=seed, status=status,
                       vocab_size=vocab if isinstance(vocab, int) else None,
                       order=start.get("variant_index") if isinstance(start.get("variant_index"), int) else None)
    curves = read_scalars(run_dir)
    record.val_curve = curves.get(VAL_TAG, [])
    record.train_curve = curves.get(TRAIN_TAG, [])
    record.init_grad_norms = _at_step_zero(curves, LAYER_GRAD_PREFIX)
    record.init_delta_ratios = _at_step_zero(curves, DELTA_RATIO_PREFIX)
    _fill_from_events(record, curves)
    if summary is not None:
        _fill_from_summary(record, summary)
    elif record.status in ("finished", "unknown") and record.divergence_kind is not None:
        record.status = "diverged"
    return record


def _at_step_zero(curves: dict[str, Curve], prefix: str) -> dict[str, float]:
    """The step-0 values of the scalars under ``prefix``, keyed by the rest of the tag."""
    return {tag[len(prefix):]: curve[0][1] for tag, curve in curves.items()
            if tag.startswith(prefix) and curve and curve[0][0] == 0}


def _fill_from_events(record: RunRecord, curves: dict[str, Curve]) -> None:
    val, train = record.val_curve, record.train_curve
    if val and val[0][0] == 0:
        record.initial_val_loss = val[0][1]
    if val:
        record.final_val_loss = val[-1][1]
        finite = [value for _, value in val if math.isfinite(value)]
        record.best_val_loss = min(finite) if finite else None
    bad_step = _first_nonfinite(val, train)
    if bad_step is not None:
        record.divergence_step, record.divergence_kind = bad_step, "nonfinite"
    elif _finite(record.final_val_loss) and _finite(record.initial_val_loss) \
            and record.final_val_loss > record.initial_val_loss:
        record.divergence_step, record.divergence_kind = val[-1][0], "above_init"
    grads = [value for _, value in curves.get(GRAD_TAG, [])]
    if grads:
        finite = [value for value in grads if math.isfinite(value)]
        record.grad_norm_median = statistics.median(finite) if finite else None
        record.grad_norm_max = max(finite) if len(finite) == len(grads) else math.inf
    record.spike_count = count_spikes([value for _, value in train])
    steps = [curve[-1][0] for curve in curves.values() if curve]
    record.steps = max(steps) + 1 if steps else None


def _fill_from_summary(record: RunRecord, summary: dict) -> None:
    record.source = SUMMARY_FILE
    for name in ("initial_val_loss", "final_val_loss", "best_val_loss", "grad_norm_median", "grad_norm_max",
                 "wall_time_s"):
        value = _number(summary.get(name))
        if value is not None:
            setattr(record, name, value)
    if isinstance(summary.get("spike_count"), int):
        record.spike_count = summary["spike_count"]
    if isinstance(summary.get("steps"), int):
        record.steps = summary["steps"]
    divergence = summary.get("divergence") or {}
    if record.status == "diverged":
        record.divergence_step = divergence.get("step")
        record.divergence_kind = divergence.get("kind")
    else:
        record.divergence_step = record.divergence_kind = None


def load_runs(root: str | Path) -> list[RunRecord]:
    root = Path(root)
    return [load_run(run_dir, root) for run_dir in find_runs(root)]


# ====================================================================== grouping and summaries


def group_runs(records: Iterable[RunRecord]) -> dict[str, dict[str, list[RunRecord]]]:
    """``{suite: {variant: [runs]}}``; variants in their suite's order where the sweep recorded it, else
    in the order first seen."""
    groups: dict[str, dict[str, list[RunRecord]]] = defaultdict(dict)
    for record in records:
        groups[record.suite].setdefault(record.variant, []).append(record)

    def position(item: tuple[str, list[RunRecord]]) -> float:
        orders = [r.order for r in item[1] if r.order is not None]
        return min(orders) if orders else math.inf

    return {suite: dict(sorted(variants.items(), key=position)) for suite, variants in groups.items()}


@dataclass
class LrCell:
    """All seeds of one variant at one learning rate."""

    lr: float
    runs: list[RunRecord]
    capped: list[float]
    mean: float
    std: float
    diverged: int
    spikes: int


@dataclass
class VariantSummary:
    suite: str
    variant: str
    runs: int
    cells: dict[float, LrCell]
    best_lr: Optional[float]
    best_mean: float
    best_std: float
    sensitivity_mean: float
    sensitivity_std: float
    within: int
    grad_norm_median: Optional[float]
    grad_norm_max: Optional[float]
    spikes: int
    excluded: list[RunRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vs_best: str = ""
    vs_most_robust: str = ""

    @property
    def lrs(self) -> list[float]:
        return sorted(self.cells)

    @property
    def diverged_per_lr(self) -> dict[float, tuple[int, int]]:
        return {lr: (cell.diverged, len(cell.runs)) for lr, cell in sorted(self.cells.items())}

    @property
    def diverged_everywhere(self) -> bool:
        """Every run at every LR diverged. Its LR sensitivity is then near 0 -- every grid point is
        equally bad -- which would otherwise read as "most robust"."""
        return bool(self.cells) and all(k == n for k, n in self.diverged_per_lr.values())


def summarise_variant(suite: str, variant: str, records: Sequence[RunRecord]) -> VariantSummary:
    """Reduce the runs of one variant to the numbers of the comparison table."""
    counted = [r for r in records if r.counted and r.lr is not None]
    excluded = [r for r in records if r not in counted]
    notes = []
    no_init = [r for r in counted if r.loss_at_init is None]
    if no_init:
        notes.append(f"{len(no_init)} run(s) without a loss at init (no val/loss at step 0, no vocab_size): "
                     "left out")
        counted = [r for r in counted if r.loss_at_init is not None]
    by_lr: dict[float, list[RunRecord]] = defaultdict(list)
    for record in counted:
        by_lr[record.lr].append(record)
    cells = {}
    for lr, runs in sorted(by_lr.items()):
        runs = sorted(runs, key=lambda r: (r.seed is None, r.seed))
        capped = [capped_loss(r.scored_loss, r.loss_at_init) for r in runs]
        mean, std = mean_std(capped)
        cells[lr] = LrCell(lr, runs, capped, mean, std, sum(r.diverged for r in runs),
                           sum(r.spike_count for r in runs))
    summary = VariantSummary(suite, variant, len(counted), cells, None, math.nan, math.nan, math.nan, math.nan,
                             0, None, None, sum(c.spikes for c in cells.values()), excluded, notes)
    if not cells:
        return summary
    best = best_key({lr: cell.mean for lr, cell in cells.items()})
    summary.best_lr, summary.best_mean, summary.best_std = best, cells[best].mean, cells[best].std
    summary.within = count_within([cell.mean for cell in cells.values()], cells[best].mean)

    # LR sensitivity per seed (each seed has its own paired LR grid), then mean +- std over seeds.
    by_seed: dict[Optional[int], list[RunRecord]] = defaultdict(list)
    for record in counted:
        by_seed[record.seed].append(record)
    sensitivities = []
    for seed, runs in sorted(by_seed.items(), key=lambda item: (item[0] is None, item[0])):
        if len({r.lr for r in runs}) < len(cells):
            notes.append(f"seed {seed} has {len({r.lr for r in runs})} of the {len(cells)} learning rates; "
                         "its LR sensitivity is over those only")
        runs = sorted(runs, key=lambda r: r.lr)
        sensitivities.append(lr_sensitivity([r.scored_loss for r in runs], [r.loss_at_init for r in runs]))
    summary.sensitivity_mean, summary.sensitivity_std = mean_std(sensitivities)

    at_best = cells[best].runs
    medians = [r.grad_norm_median for r in at_best if r.grad_norm_median is not None]
    maxima = [r.grad_norm_max for r in at_best if r.grad_norm_max is not None]
    summary.grad_norm_median = statistics.median(medians) if medians else None
    summary.grad_norm_max = max(maxima) if maxima else None
    return summary


def summarise(records: Iterable[RunRecord]) -> dict[str, list[VariantSummary]]:
    """Per suite, one summary per variant, with the "vs best" verdicts filled in."""
    result = {}
    for suite, variants in group_runs(records).items():
        summaries = [summarise_variant(suite, name, runs) for name, runs in variants.items()]
        mark_verdicts(summaries)
        grids = {tuple(s.lrs) for s in summaries if s.cells}
        if len(grids) > 1 and summaries:
            summaries[0].notes.append("the variants of this suite were run on different LR grids: their LR "
                                      "sensitivities are not comparable")
        result[suite] = summaries
    return result


def mark_verdicts(summaries: Sequence[VariantSummary]) -> None:
    """Fill ``vs_best`` (val loss at the best LR) and ``vs_most_robust`` (LR sensitivity)."""
    scored = [s for s in summaries if math.isfinite(s.best_mean)]
    if not scored:
        return
    best = min(scored, key=lambda s: s.best_mean)
    for s in scored:
        s.vs_best = "best" if s is best else verdict(s.best_mean, s.best_std, best.best_mean, best.best_std)
    for s in scored:
        if s.diverged_everywhere:
            s.vs_most_robust = "n/a: diverged at every LR"
    robust_scored = [s for s in scored if math.isfinite(s.sensitivity_mean) and not s.diverged_everywhere]
    if robust_scored:
        robust = min(robust_scored, key=lambda s: s.sensitivity_mean)
        for s in robust_scored:
            s.vs_most_robust = "most robust" if s is robust else verdict(
                s.sensitivity_mean, s.sensitivity_std, robust.sensitivity_mean, robust.sensitivity_std)


# ====================================================================== tables


def fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def fmt_pm(mean: float, std: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "n/a"
    return fmt(mean, digits) if not math.isfinite(std) else f"{fmt(mean, digits)} ± {fmt(std, digits)}"


def _fmt_grad(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:.3g}"


SUMMARY_COLUMNS = ["variant", "runs", "best LR", "val loss at best LR", "vs best variant", "LR sensitivity",
                   "vs most robust", "diverged per LR", f"LRs within {NEAR_BEST_NATS} nat",
                   "grad norm median / max", "spikes"]


def summary_rows(summaries: Sequence[VariantSummary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        diverged = " · ".join(f"{format_lr(lr)}: {k}/{n}" for lr, (k, n) in s.diverged_per_lr.items())
        rows.append([
            s.variant, str(s.runs), format_lr(s.best_lr) if s.best_lr is not None else "n/a",
            fmt_pm(s.best_mean, s.best_std), s.vs_best or "n/a", fmt_pm(s.sensitivity_mean, s.sensitivity_std),
            s.vs_most_robust or "n/a", diverged or "n/a", f"{s.within}/{len(s.cells)}",
            f"{_fmt_grad(s.grad_norm_median)} / {_fmt_grad(s.grad_norm_max)}", str(s.spikes),
        ])
    return rows


PER_LR_COLUMNS = ["variant", "LR", "seeds", "final val loss (capped)", "diverged", "spikes", "grad norm median"]


def per_lr_rows(summaries: Sequence[VariantSummary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        for lr, cell in sorted(s.cells.items()):
            medians = [r.grad_norm_median for r in cell.runs if r.grad_norm_median is not None]
            marker = " ←best" if lr == s.best_lr else ""
            rows.append([s.variant, format_lr(lr) + marker, str(len(cell.runs)), fmt_pm(cell.mean, cell.std),
                         f"{cell.diverged}/{len(cell.runs)}", str(cell.spikes),
                         _fmt_grad(statistics.median(medians)) if medians else "n/a"])
    return rows


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(columns), "|" + "|".join("---" for _ in columns) + "|", *map(line, rows)])


def csv_rows(summaries: Sequence[VariantSummary]) -> tuple[list[str], list[list]]:
    """The summary table with one number per cell, for spreadsheets and scripts."""
    header = ["suite", "variant", "runs", "best_lr", "val_loss_mean", "val_loss_std", "vs_best_variant",
              "lr_sensitivity_mean", "lr_sensitivity_std", "vs_most_robust", "lrs", "diverged_per_lr",
              "diverged_total", "lrs_within_0.1_nat", "grad_norm_median", "grad_norm_max", "spikes"]
    rows = []
    for s in summaries:
        rows.append([
            s.suite, s.variant, s.runs, "" if s.best_lr is None else s.best_lr, _csv(s.best_mean), _csv(s.best_std),
            s.vs_best, _csv(s.sensitivity_mean), _csv(s.sensitivity_std), s.vs_most_robust,
            ";".join(format_lr(lr) for lr in s.lrs),
            ";".join(f"{k}/{n}" for k, n in s.diverged_per_lr.values()),
            sum(k for k, _ in s.diverged_per_lr.values()), s.within, _csv(s.grad_norm_median),
            _csv(s.grad_norm_max), s.spikes,
        ])
    return header, rows


def _csv(value: Optional[float]):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


RUN_COLUMNS = ["suite", "variant", "lr", "seed", "status", "initial_val_loss", "final_val_loss", "best_val_loss",
               "divergence_kind", "divergence_step", "grad_norm_median", "grad_norm_max", "spike_count", "steps",
               "source", "path"]


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


LEGEND = f"""\
How to read this table (see docs/experiments.md):

- **val loss at best LR**: final validation loss at the learning rate whose mean over seeds is lowest, mean ± std over seeds.
  A diverged run counts as its loss at init (min(final, loss at init)), so one blow-up is capped, not infinite.
- **vs best variant**: the difference to the variant with the lowest val loss at its best LR; "no difference" when it
  is smaller than twice the seed spread (the larger of the two standard deviations over seeds).
- **LR sensitivity** (Wortsman et al. 2023): mean over the LR grid of min(final val loss, val loss at step 0) minus its
  best value, computed per seed, mean ± std over seeds. Lower = less sensitive to the learning rate. Compare variants
  only on the same LR grid. A variant that diverged at every LR is equally bad everywhere, so its sensitivity is
  near 0; it is not ranked ("n/a: diverged at every LR").
- **diverged per LR**: diverged runs / runs at each LR. **LRs within {NEAR_BEST_NATS} nat**: grid points whose mean
  capped loss is within {NEAR_BEST_NATS} nat of the best.
- **grad norm median / max**: of the training gradient norm (before clipping), at the best LR (median over seeds of
  each run's median; max over seeds). **spikes**: loss spikes summed over all runs of the variant.
"""


INIT_COLUMNS = ["variant", "runs", "grad norm: embeddings", "grad norm: first block", "grad norm: last block",
                "first / last block", "attn delta/stream: mean (max)", "MLP delta/stream: mean (max)"]


def _mean(values: Sequence[float]) -> Optional[float]:
    finite = [v for v in values if _finite(v)]
    return sum(finite) / len(finite) if finite else None


def init_profile(runs: Sequence[RunRecord]) -> dict[str, Optional[float]]:
    """The step-0 picture of a variant, averaged over its runs (the init depends on the seed only, so
    runs of one seed at different LRs repeat the same values): the gradient norm of the embeddings and
    of the first and last block, and the sublayer-delta-to-stream ratios (mean and max over blocks).
    A block whose deltas are small against the stream is near the identity at initialisation."""
    grads: dict[str, list[float]] = defaultdict(list)
    deltas: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for name, value in run.init_grad_norms.items():
            grads[name].append(value)
        for name, value in run.init_delta_ratios.items():
            deltas[name].append(value)
    blocks = sorted(name for name in grads if name.startswith("block_"))
    mean_grads = {name: _mean(values) for name, values in grads.items()}
    first = mean_grads[blocks[0]] if blocks else None
    last = mean_grads[blocks[-1]] if blocks else None
    profile: dict[str, Optional[float]] = {
        "embeddings": mean_grads.get("embeddings"), "first_block": first, "last_block": last,
        "first_over_last": first / last if _finite(first) and _finite(last) and last else None,
    }
    for part in ("attn", "mlp"):
        per_block = [m for name, values in deltas.items() if name.endswith(f"_{part}")
                     for m in [_mean(values)] if m is not None]
        profile[f"{part}_delta_mean"] = _mean(per_block)
        profile[f"{part}_delta_max"] = max(per_block) if per_block else None
    return profile


def init_rows(summaries: Sequence[VariantSummary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        runs = [r for cell in s.cells.values() for r in cell.runs]
        p = init_profile(runs)
        if all(value is None for value in p.values()):
            continue
        rows.append([s.variant, str(len(runs)), fmt(p["embeddings"]), fmt(p["first_block"]), fmt(p["last_block"]),
                     fmt(p["first_over_last"], 2),
                     f"{fmt(p['attn_delta_mean'])} ({fmt(p['attn_delta_max'])})",
                     f"{fmt(p['mlp_delta_mean'])} ({fmt(p['mlp_delta_max'])})"])
    return rows


INIT_LEGEND = """\
At step 0, before any update, on the StabilityMonitor's fixed probe batch, mean over the variant's runs:
gradient norms of the embeddings and of the first and last block (their ratio shows how evenly the
gradient reaches the depth), and delta/stream = ‖output − input‖ / ‖input‖ of each attention and MLP
sublayer's wrapper (mean and max over blocks). For pre-norm that is the sublayer's output against the
stream it is added to: well below 1 means the block starts close to the identity. For post-norm the
change includes the LayerNorm after the add, which rescales the stream (by far the most at block 0,
whose input is the small raw embedding).
"""


def suite_markdown(suite: str, summaries: Sequence[VariantSummary], notes: Sequence[str]) -> str:
    parts = [f"# Comparison: {suite}", "", markdown_table(SUMMARY_COLUMNS, summary_rows(summaries)), "",
             "## Per learning rate", "", markdown_table(PER_LR_COLUMNS, per_lr_rows(summaries)), ""]
    at_init = init_rows(summaries)
    if at_init:
        parts += ["## At initialisation", "", markdown_table(INIT_COLUMNS, at_init), "", INIT_LEGEND]
    if notes:
        parts += ["## Notes", "", *[f"- {note}" for note in notes], ""]
    parts += [LEGEND]
    return "\n".join(parts)


def suite_notes(summaries: Sequence[VariantSummary]) -> list[str]:
    notes = []
    for s in summaries:
        for note in dict.fromkeys(s.notes):
            notes.append(f"{s.variant}: {note}")
        for record in s.excluded:
            reason = record.status if record.lr is not None else f"{record.status}, learning rate unknown"
            notes.append(f"{s.variant}: left out {record.path.name} ({reason})")
    return notes


def write_outputs(records: Sequence[RunRecord], out: Path) -> dict[str, dict]:
    """Write Markdown, CSV and PNGs for every suite found; returns what was written, per suite."""
    from andrea_lab.analysis import plots

    out.mkdir(parents=True, exist_ok=True)
    by_suite = summarise(records)
    written: dict[str, dict] = {}
    for suite, summaries in by_suite.items():
        directory = out if len(by_suite) == 1 else out / suite
        directory.mkdir(parents=True, exist_ok=True)
        notes = suite_notes(summaries)
        files = {}
        plot_notes = []
        files["loss_curves"] = plots.plot_loss_curves(summaries, directory / "loss_curves.png")
        files["loss_vs_lr"] = plots.plot_loss_vs_lr(summaries, directory / "loss_vs_lr.png")
        grad_plot = plots.plot_init_grad_norms(summaries, directory / "grad_norm_init.png")
        if grad_plot is None:
            plot_notes.append("gradient norm by layer at init: skipped, no run has stability/grad_norm/block_XX "
                              "scalars at step 0 (the StabilityMonitor callback logs them)")
        else:
            files["grad_norm_init"] = grad_plot
        delta_plot = plots.plot_init_delta_ratios(summaries, directory / "delta_ratio_init.png")
        if delta_plot is not None:
            files["delta_ratio_init"] = delta_plot
        notes = notes + plot_notes
        markdown = suite_markdown(suite, summaries, notes)
        files["markdown"] = directory / "comparison.md"
        files["markdown"].write_text(markdown, encoding="utf-8")
        header, rows = csv_rows(summaries)
        files["csv"] = directory / "comparison.csv"
        write_csv(files["csv"], header, rows)
        files["runs_csv"] = directory / "runs.csv"
        suite_records = [r for s in summaries for cell in s.cells.values() for r in cell.runs] + \
                        [r for s in summaries for r in s.excluded]
        write_csv(files["runs_csv"], RUN_COLUMNS,
                  ([r.suite, r.variant, "" if r.lr is None else r.lr, "" if r.seed is None else r.seed, r.status,
                    _csv(r.initial_val_loss), _csv(r.final_val_loss), _csv(r.best_val_loss), r.divergence_kind or "",
                    "" if r.divergence_step is None else r.divergence_step, _csv(r.grad_norm_median),
                    _csv(r.grad_norm_max), r.spike_count, "" if r.steps is None else r.steps, r.source, str(r.path)]
                   for r in sorted(suite_records, key=lambda r: (r.variant, r.lr or 0, r.seed or 0))))
        written[suite] = {"summaries": summaries, "files": files, "notes": notes, "markdown": markdown}
    return written
