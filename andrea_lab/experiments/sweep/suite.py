"""Suite files: which base config, which variants, which learning rates and seeds.

A suite is a small YAML file::

    name: norm_placement            # optional; default: the file name without .yaml
    description: pre vs post-norm, each with and without warmup
    base: ../cpu-base.yaml          # the experiment config every run starts from (relative to this file)
    common:                         # optional dotted overrides applied to every run
      trainer.max_steps: 250
    lrs: [1.0e-3, 3.0e-3, 1.0e-2]   # the learning-rate grid (model.lr)
    seeds: [0, 1]                   # seed_everything and data.seed of each run
    variants:
      - name: pre
        overrides: {model.config.norm_placement: pre}
      - name: post-nowarmup
        overrides: {model.config.norm_placement: post, model.warmup_steps: 0}
        lrs: [3.0e-4, 1.0e-3, 3.0e-3]   # optional: this variant's own grid instead of the suite's
    reference: pre                  # optional: what andrea compare pairs every variant with (default: the first)
    claims:                         # optional: hypotheses andrea compare evaluates (docs/experiments.md)
      - lower_loss: [pre, post-nowarmup]
        text: pre-norm reaches a lower loss at its best LR
        lr: [2.0e-3, 4.0e-3]        # optional: judged at LRs fixed in advance (one claim each), no selection
        lr_from: [norm_placement]   # optional: the committed suites that chose those LRs (seeds checked disjoint)
        published: "Xiong et al. 2020: ..."  # optional: the published result, in the claim's direction
        exploratory: false          # optional: true = outside the Holm-adjusted family
    search: {keys: {...}, base: {...}, budget: 8, tuning_seeds: [900]}  # optional: coordinate descent per
                                    # variant (andrea_lab.experiments.sweep.search_suite); a variant may add keys
    scales:                         # optional: every variant at each scale (andrea_lab.experiments.sweep.scales)
      - name: d64
        overrides: {model.config.d_model: 64, model.config.n_head: 2}

Every run is ``andrea fit --config BASE`` followed by the common overrides, then the variant's, then
the keys the sweep itself owns (``model.lr``, ``seed_everything``, ``data.seed`` and the logger's
``save_dir``/``name``/``version``), which a suite may therefore not set. :func:`load_suite` checks all
of this and raises :class:`SuiteError` naming the offending key or value.

A variant may tune over its own LR grid (``lrs:`` in the variant): an optimizer whose best LR lies a decade
away from AdamW's needs a grid around its own optimum to be compared fairly. How many LRs a variant tried per
seed is its *tuning budget*; ``andrea compare`` prints each variant's and refuses a claim between variants of
different budgets unless the claim says so (``unequal_budgets: true``), and a ``lower_sensitivity`` claim
between variants whose grids differ (:mod:`andrea_lab.experiments.compare.claims`).

Divergence counts compare variants only if the StabilityMonitor looks for a stuck run over the same steps in
every variant: its window starts at ``stability.stuck_after``, else at each run's ``model.warmup_steps``, so
a suite whose variants differ in warmup must set ``stability.stuck_after`` (:func:`check_stuck_windows`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from andrea_lab.errors import UsageError
from andrea_lab.experiments.sweep.extend_grid import ExtendGrid, parse_extend_grid
from andrea_lab.experiments.sweep.grid import (  # noqa: F401 (re-exported)
    MAX_RUNS,
    check_grid_size,
    parse_cli_list,
    parse_grid,
    parse_lr,
    parse_seed,
)
from andrea_lab.experiments.sweep.ladder import parse_ladder
from andrea_lab.experiments.sweep.scales import parse_per_scale, parse_scales
from andrea_lab.experiments.sweep.search_suite import check_lrs as check_search_lrs
from andrea_lab.experiments.sweep.search_suite import parse_searches
from andrea_lab.experiments.sweep.suite_keys import (  # noqa: F401 (SuiteError, RESERVED_KEYS, check_overrides re-exported)
    RESERVED_KEYS,
    SuiteError,
    check_name,
    check_overrides,
    named_entry,
    unknown_key_message,
)
from andrea_lab.runs.directory import format_lr, parse_run_version, run_version  # noqa: F401 (re-exported)
from andrea_lab.safe_yaml import read_yaml

SUITE_KEYS = (
    "name",
    "description",
    "base",
    "common",
    "lrs",
    "seeds",
    "variants",
    "reference",
    "claims",
    "resources",
    "scales",
    "extend_grid",
    "ladder",
    "search",
    "unequal_budgets_ok",
)
#: What one run of the suite holds under ``--launcher ray`` (``resources: {cpus: 4, gpus: 1}``).
RESOURCE_KEYS = ("cpus", "gpus")
REQUIRED_SUITE_KEYS = ("base", "lrs", "seeds", "variants")
VARIANT_KEYS = ("name", "description", "overrides", "seed_offset", "lrs", "search", "per_scale")


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    #: Added to the seed of every run of this variant (init and data). For A/A checks only: a variant
    #: that differs from another only by its seeds must come out "not detected" in ``andrea compare``.
    seed_offset: int = 0
    #: This variant's own learning-rate grid; None: the suite's ``lrs``.
    lrs: Optional[tuple[float, ...]] = None
    #: Overrides at one scale only (``{scale: {key: value}}``), applied after the scale's: the one way a variant
    #: sets a key the scale axis owns, rung by rung (e.g. GPT-2's init_std where the rungs scale it).
    per_scale: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    base: Path
    variants: tuple[Variant, ...]
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    common: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    #: The variant every other one is compared with (``andrea compare``); default the first.
    reference: Optional[str] = None
    #: Hypotheses ``andrea compare`` evaluates (andrea_lab.experiments.compare.stats.Claim), as written in the file.
    claims: tuple[Any, ...] = ()
    #: ``{"cpus": float, "gpus": float}`` per run, for executors that reserve resources (Ray); may be empty.
    resources: dict[str, float] = field(default_factory=dict)
    #: The scale axis (:class:`andrea_lab.experiments.sweep.scales.Scale`): every variant at every scale; empty: no
    #: axis.
    scales: tuple[Any, ...] = ()
    #: LRs the sweep adds beyond an edge optimum (andrea_lab.experiments.sweep.extend_grid); None: none.
    extend_grid: Optional[ExtendGrid] = None
    #: Rungs (the scales) growing in compute, the decisions asked, per-rung grids (sweep.ladder); None: no ladder.
    ladder: Optional[Any] = None
    #: Each searching variant's coordinate descent (sweep.search_suite): variant name -> Search; empty: none.
    searches: dict[str, Any] = field(default_factory=dict)
    #: The suite ranks variants searched with different budgets on purpose (compare refuses it otherwise).
    unequal_budgets_ok: bool = False

    def identical_variants(self) -> Optional[tuple[str, str]]:
        """The first two variants with the same overrides and different seed offsets: an A/A pair (one
        configuration under different seeds), whose false-positive rate ``andrea compare`` resamples."""
        for index, first in enumerate(self.variants):
            for second in self.variants[index + 1 :]:
                alike = first.overrides == second.overrides and first.per_scale == second.per_scale
                if alike and first.seed_offset != second.seed_offset:
                    return first.name, second.name
        return None

    def lrs_of(self, variant: Variant) -> tuple[float, ...]:
        """The learning rates ``variant`` is run at: its own grid, else the suite's."""
        return self.lrs if variant.lrs is None else variant.lrs

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise SuiteError(
            f"{self.path}: no variant named {name!r}; variants: {', '.join(v.name for v in self.variants)}"
        )


# ------------------------------------------------------------------ values


def cli_value(value: Any) -> str:
    """An override value as LightningCLI reads it on the command line (it parses values as YAML)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value)


def override_args(overrides: dict[str, Any]) -> list[str]:
    """``{"a.b": 1}`` -> ``["--a.b", "1"]``, in the mapping's order."""
    args: list[str] = []
    for key, value in overrides.items():
        args += [f"--{key}", cli_value(value)]
    return args


# ------------------------------------------------------------------ loading


def _read_document(path: Path) -> dict:
    """The suite file as a mapping with only known keys and every required one."""
    if not os.path.lexists(path):
        raise SuiteError(f"suite file {str(path)!r} does not exist")
    try:
        document = read_yaml(path, "suite file")  # within safe_yaml's bounds: no alias bomb, no FIFO
    except UsageError as exc:
        raise SuiteError(str(exc)) from None
    if not isinstance(document, dict):
        raise SuiteError(f"{path}: a suite must be a mapping with keys {', '.join(SUITE_KEYS)}")
    for key in document:
        if key not in SUITE_KEYS:
            raise SuiteError(unknown_key_message(str(path), key, SUITE_KEYS))
    for key in REQUIRED_SUITE_KEYS:
        if key not in document:
            raise SuiteError(f"{path}: missing required key {key!r}")
    return document


def _base_config(path: Path, base_value: Any) -> Path:
    """The experiment YAML the suite's runs start from, relative to the suite file."""
    if not isinstance(base_value, str) or not base_value:
        raise SuiteError(f"{path}: base must be the path of an experiment YAML, got {base_value!r}")
    base = (path.parent / base_value).resolve()
    if not base.is_file():
        raise SuiteError(f"{path}: base config {base_value!r} does not exist (looked for {base})")
    return base


def _variant(raw: Any, number: int, where: str, seen: dict[str, int]) -> Variant:
    """Variant ``number`` (from 1) of the list, checked against the names ``seen`` before it (then added)."""
    variant_name, overrides = named_entry(raw, number, "variant", VARIANT_KEYS, where, seen)
    description = raw.get("description") or ""
    seed_offset = raw.get("seed_offset", 0)
    if not isinstance(seed_offset, int) or isinstance(seed_offset, bool) or seed_offset < 0:
        raise SuiteError(
            f"{where}: variant {variant_name!r}: seed_offset must be a non-negative integer, got {seed_offset!r}"
        )
    lrs = None
    if raw.get("lrs") is not None:
        if not isinstance(raw["lrs"], list):
            raise SuiteError(f"{where}: variant {variant_name!r}: lrs must be a list, got {raw['lrs']!r}")
        lrs = parse_grid(raw["lrs"], "lrs", f"{where}: variant {variant_name!r}")
    per_scale = parse_per_scale(raw.get("per_scale"), f"{where}: variant {variant_name!r}")
    return Variant(variant_name, overrides, str(description), seed_offset, lrs, per_scale)


def _variants(raw_variants: Any, where: str) -> list[Variant]:
    if not isinstance(raw_variants, list):
        raise SuiteError(f"{where}: variants must be a list of {{name: ..., overrides: {{...}}}}, got {raw_variants!r}")
    if not raw_variants:
        raise SuiteError(f"{where}: variants is empty; list at least one")
    seen: dict[str, int] = {}
    return [_variant(raw, number, where, seen) for number, raw in enumerate(raw_variants, start=1)]


def _check_claims(claims: list, grids: dict[str, tuple[float, ...]], where: str, scaled: bool) -> None:
    """Each claim parses, names two of the suite's variants, and fixes each variant's LR (``lr:``) to one of
    that variant's grid (``grids``: variant name -> its LRs); a claim across scales needs ``scales:``."""
    names = list(grids)
    try:
        # Imported here: the statistics need pandas and scipy, which a suite without claims never loads.
        from andrea_lab.experiments.compare.claim_spec import ACROSS_SCALES
        from andrea_lab.experiments.compare.claims import parse_claims

        for claim in parse_claims(claims) if claims else []:
            if claim.kind in ACROSS_SCALES and not scaled:
                raise ValueError(f"{claim.kind} compares a difference across scales; this suite has no scales:")
            for named in (claim.a, claim.b):
                if named not in names:
                    raise ValueError(f"claim {claim.kind}: {named!r} is not a variant; variants: {', '.join(names)}")
            for named, lr in zip((claim.a, claim.b), claim.lrs or ()):
                grid = grids[named]
                if format_lr(lr) not in {format_lr(value) for value in grid}:
                    raise ValueError(
                        f"claim {claim.label}: lr {format_lr(lr)} is not in {named}'s lrs "
                        f"({', '.join(format_lr(value) for value in grid)})"
                    )
    except ValueError as problem:
        raise SuiteError(f"{where}: claims: {problem}") from None


_UNSET = object()


def _nested(document: Any, dotted: str) -> Any:
    """``document["a"]["b"]`` for ``"a.b"``, or :data:`_UNSET`."""
    for part in dotted.split("."):
        if not isinstance(document, dict) or part not in document:
            return _UNSET
        document = document[part]
    return document


def _module_default_warmup() -> Any:
    """``AndreaLM``'s own ``warmup_steps`` default (imported only when a variant falls back to it)."""
    import inspect

    from andrea_lab.fit.module import AndreaLM  # Lightning: only when a variant falls back to the default

    return inspect.signature(AndreaLM.__init__).parameters["warmup_steps"].default


def _distinct(values: Iterable[Any]) -> int:
    """How many different values (40 and 40.0 are one)."""
    return len({float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v) for v in values})


def stuck_windows(suite: Suite) -> dict[str, Any]:
    """Per variant, the step its stuck-at-unigram window starts at: ``stability.stuck_after`` (variant, else
    common, else the base config), or when that is unset (null) the run's ``model.warmup_steps`` — the
    StabilityMonitor's rule (docs/stability.md)."""
    try:
        base = read_yaml(suite.base, "base config")
    except UsageError:
        base = {}

    def value(variant: Variant, key: str) -> Any:
        for source in (variant.overrides, suite.common):
            if key in source:
                return source[key]
        return _nested(base, key)

    windows = {}
    for variant in suite.variants:
        start = value(variant, "stability.stuck_after")
        if start is _UNSET or start is None:
            start = value(variant, "model.warmup_steps")
        windows[variant.name] = start
    if _distinct(windows.values()) > 1 and _UNSET in windows.values():
        default = _module_default_warmup()
        windows = {name: default if start is _UNSET else start for name, start in windows.items()}
    return windows


def check_stuck_windows(suite: Suite) -> None:
    """Refuse a suite whose variants would start the stuck-at-unigram window at different steps: their
    divergence counts would not be on equal footing (one line, naming every variant's window)."""
    windows = stuck_windows(suite)
    if _distinct(windows.values()) > 1:
        listed = ", ".join(f"{name} {start}" for name, start in windows.items())
        raise SuiteError(
            f"{suite.path}: the stuck-at-unigram window would start at different steps ({listed}; it "
            "starts at stability.stuck_after, else at each variant's model.warmup_steps); set "
            "stability.stuck_after under common: to one step for every variant, e.g. the longest "
            "warmup"
        )


def parse_resources(value: Any, where: str) -> dict[str, float]:
    """``{cpus: N, gpus: N}``: non-negative numbers; either may be left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SuiteError(f"{where} must be a mapping like {{cpus: 4, gpus: 1}}, got {value!r}")
    resources = {}
    for key, amount in value.items():
        if key not in RESOURCE_KEYS:
            raise SuiteError(unknown_key_message(where, key, RESOURCE_KEYS))
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
            raise SuiteError(f"{where}: {key} must be a non-negative number, got {amount!r}")
        resources[key] = float(amount)
    return resources


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file."""
    path = Path(path)
    document = _read_document(path)
    where = str(path)
    name = check_name(document.get("name", path.stem.replace(" ", "_")), f"{where}: name")
    base = _base_config(path, document["base"])
    for key in ("lrs", "seeds"):
        if not isinstance(document[key], list):
            raise SuiteError(f"{where}: {key} must be a list, got {document[key]!r}")
    check_grid_size(document, where)
    lrs = parse_grid(document["lrs"], "lrs", where)
    seeds = parse_grid(document["seeds"], "seeds", where)
    common = check_overrides(document.get("common"), f"{where}: common")
    variants = _variants(document["variants"], where)
    names = [v.name for v in variants]
    reference = document.get("reference", variants[0].name)
    if reference not in names:
        raise SuiteError(f"{where}: reference {reference!r} is not a variant; variants: {', '.join(names)}")
    claims = document.get("claims") or []
    searches = parse_searches(document, document["variants"], names, seeds, where)
    check_search_lrs(searches, {v.name: lrs if v.lrs is None else v.lrs for v in variants}, where)
    scales = parse_scales(document.get("scales"), where, common, variants)
    _check_claims(claims, {v.name: lrs if v.lrs is None else v.lrs for v in variants}, where, bool(scales))
    suite = Suite(
        name=name,
        path=path.resolve(),
        base=base,
        variants=tuple(variants),
        lrs=lrs,
        seeds=seeds,
        common=common,
        description=str(document.get("description") or ""),
        reference=reference,
        claims=tuple(claims),
        resources=parse_resources(document.get("resources"), f"{where}: resources"),
        scales=scales,
        extend_grid=parse_extend_grid(
            document.get("extend_grid"),
            f"{where}: extend_grid",
            {v.name: lrs if v.lrs is None else v.lrs for v in variants},
        ),
        ladder=parse_ladder(document.get("ladder"), where, name, scales, names, seeds, parse_grid, path.parent),
        searches=searches,
        unequal_budgets_ok=bool(document.get("unequal_budgets_ok", False)),
    )
    check_stuck_windows(suite)
    return suite
