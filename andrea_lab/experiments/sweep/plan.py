"""Planning a sweep: every (seed, learning rate, variant) combination, its directory and its command.

Runs land in ``<runs-dir>/<suite>/<variant>/lr<lr>-seed<seed>/`` (the TensorBoard logger's
``save_dir``/``name``/``version``), so a directory says what it holds and is the same every time the
suite is planned; that is what makes a sweep resumable. A suite with a scale axis
(:mod:`andrea_lab.experiments.sweep.scales`) puts each scale's runs one level down, in
``<runs-dir>/<suite>/<scale>/<variant>/lr<lr>-seed<seed>/``. Order: seeds outermost, then scales, then
learning rates, then variants, so that an interrupted sweep already holds complete single-seed comparisons.

Whether a planned run is new, done, failed or interrupted is :func:`andrea_lab.runs.directory.run_state`,
the one resume rule every executor follows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from andrea_lab.experiments.sweep.ladder import grids_at, rung_grid
from andrea_lab.experiments.sweep.scales import Scale, check_disjoint, choose_scales
from andrea_lab.experiments.sweep.suite import Suite, SuiteError, format_lr, override_args, run_version

TENSORBOARD_LOGGER = "andrea_lab.fit.loggers.AndreaTensorBoardLogger"  # given the version: no claim, no epoch


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: what it trains, where it goes and the command that does it."""

    index: int
    total: int
    suite: str
    variant: str
    lr: float
    seed: int
    run_dir: Path
    command: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    variant_index: int = 0  # the variant's position in the suite (keeps tables in suite order)
    suite_file: Optional[str] = None  # so that `andrea compare` finds the suite's reference and claims
    scale: Optional[str] = None  # the scale's name; None for a suite without a scale axis
    scale_index: int = 0  # the scale's position in the suite (keeps the trend in suite order)
    #: The coordinate-descent step that planned the run (sweep.search_runs), for its label and record; None: grid.
    search_step: Optional[str] = None

    @property
    def label(self) -> str:
        at_scale = f"{self.scale} " if self.scale is not None else ""
        step = f" ({self.search_step})" if self.search_step else ""
        return f"{at_scale}{self.variant} lr={format_lr(self.lr)} seed={self.seed}{step}"

    @property
    def counter(self) -> str:
        width = len(str(self.total))
        return f"[{self.index:>{width}}/{self.total}]"

    @property
    def fit_args(self) -> tuple[str, ...]:
        """The arguments ``andrea fit`` parses: what the preflight reads the run's config from."""
        return self.command[self.command.index("fit") + 1 :]


def first_run_per_variant(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """The first planned run of each (scale, variant): its LRs and seeds all build the same model, and each
    scale changes it, so this is what a check of every model a suite builds needs."""
    firsts: dict[tuple[Optional[str], str], RunSpec] = {}
    for spec in specs:
        firsts.setdefault((spec.scale, spec.variant), spec)
    return list(firsts.values())


def suite_runs_dir(runs_dir: str | Path, suite: Suite) -> Path:
    return Path(runs_dir) / suite.name


def fit_command(
    suite: Suite,
    variant_overrides: dict[str, Any],
    lr: float,
    seed: int,
    save_dir: Path,
    variant: str,
    python: str = sys.executable,
    version: Optional[str] = None,
) -> list[str]:
    """``python -P -m andrea_lab.cli fit --config BASE`` + common + variant overrides + what the sweep owns.

    ``-P``: the working directory is not put on the module path, so a file there named like a module
    (``evilmod.py``, a stray ``torch.py``) is never what a fit imports."""
    return [
        python,
        "-P",
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        str(suite.base),
        *override_args(suite.common),
        *override_args(variant_overrides),
        "--model.lr",
        repr(float(lr)),
        "--seed_everything",
        str(seed),
        "--data.seed",
        str(seed),
        "--trainer.logger.class_path",
        TENSORBOARD_LOGGER,
        "--trainer.logger.init_args.save_dir",
        str(save_dir),
        "--trainer.logger.init_args.name",
        variant,
        "--trainer.logger.init_args.version",
        version or run_version(lr, seed),
        "--trainer.logger.init_args.default_hp_metric",
        "false",
        "--summary.suite",
        suite.name,
        "--summary.variant",
        variant,  # hparams to filter the runs by
    ]


def plan_sweep(
    suite: Suite,
    runs_dir: str | Path,
    lrs: Optional[Sequence[float]] = None,
    seeds: Optional[Sequence[int]] = None,
    variants: Optional[Sequence[str]] = None,
    python: str = sys.executable,
    scales: Optional[Sequence[str]] = None,
) -> list[RunSpec]:
    """Every combination of the suite (or of the grids given instead), in run order. Each variant runs at its
    own LR grid where it has one; ``lrs`` (``--lrs``) replaces every variant's."""
    seeds_given, seeds = seeds is not None, tuple(suite.seeds if seeds is None else seeds)
    chosen = suite.variants if variants is None else tuple(suite.variant(name) for name in variants)
    points = choose_scales(suite.scales, scales, str(suite.path))
    grids = {variant.name: tuple(suite.lrs_of(variant) if lrs is None else lrs) for variant in chosen}
    if not seeds or not chosen or not all(grids.values()):
        raise SuiteError(
            f"{suite.path}: nothing to run (lrs: {list(lrs if lrs is not None else suite.lrs)}, "
            f"seeds: {list(seeds)}, variants: {[v.name for v in chosen]})"
        )
    check_disjoint(suite.scales, suite.common, suite.variants, str(suite.path))  # --set may have added a key
    save_dir = suite_runs_dir(runs_dir, suite).resolve()
    handed = (lrs is not None, seeds_given)
    combos = _combinations(seeds, points, suite.lrs if lrs is None else lrs, chosen, grids, suite.ladder, handed)
    position = {variant.name: number for number, variant in enumerate(suite.variants)}
    scale_position = {scale.name: number for number, scale in enumerate(suite.scales)}
    specs = []
    for index, (seed, scale, lr, variant) in enumerate(combos, start=1):
        directory = save_dir if scale is None else save_dir / scale.name
        at_scale = variant.per_scale.get(scale.name, {}) if scale is not None else {}
        overrides = {**_scale_overrides(scale), **variant.overrides, **at_scale}
        specs.append(
            RunSpec(
                index=index,
                total=len(combos),
                suite=suite.name,
                variant=variant.name,
                lr=float(lr),
                seed=seed,
                run_dir=directory / variant.name / run_version(lr, seed),
                command=tuple(
                    fit_command(
                        suite,
                        overrides,
                        lr,
                        seed + variant.seed_offset,
                        directory,
                        variant.name,
                        python,
                        version=run_version(lr, seed),
                    )
                ),
                overrides={**suite.common, **overrides},
                variant_index=position[variant.name],
                suite_file=str(suite.path),
                scale=None if scale is None else scale.name,
                scale_index=0 if scale is None else scale_position[scale.name],
            )
        )
    return specs


def _combinations(seeds, points, lrs, chosen, grids: dict[str, tuple], ladder=None, handed=(False, False)) -> list:
    """(seed, scale, lr, variant) in run order: seeds outermost, then scales, LRs (the suite's order, then
    those only variants' own grids have) and variants, each variant at the LRs of its grid only. A ladder's
    rung with its own grid (sweep.ladder) runs its LRs and seeds instead, unless ``--lrs``/``--seeds`` were
    ``handed``."""
    combos = []
    for seed in seeds:
        for scale in points:
            rung = None if scale is None else scale.name
            rung_seeds = rung_grid(ladder, rung, "seeds", handed[1])
            if rung_seeds is not None and seed not in rung_seeds:
                continue
            rung_lrs = rung_grid(ladder, rung, "lrs", handed[0])
            at = grids_at(grids, rung_lrs)
            every_lr = dict.fromkeys(lr for grid in (rung_lrs or lrs, *at.values()) for lr in grid)
            combos += [(seed, scale, lr, variant) for lr in every_lr for variant in chosen if lr in at[variant.name]]
    return combos


def _scale_overrides(scale: Optional[Scale]) -> dict[str, Any]:
    return {} if scale is None else dict(scale.overrides)
