"""The sweep's fastest correct path per rung: bf16 and ``torch.compile`` where they pay, from a measured rule.

A fit's speed on the CPU depends on three things the sweep knows before it starts (docs/performance.md, "bf16 on
the CPU's matrix units" and "A compile paid once per shape"):

* **bf16 units.** ``bf16-mixed`` runs its matmuls on AMX or AVX512-BF16; without them bf16 is a slow emulation.
  Detected from /proc/cpuinfo (andrea_lab.runs.machine), never assumed.
* **Width.** With the units and the attention in float32 (below), a ``bf16-mixed`` step ran 1.27x an fp32 one at
  d64, 1.42x at d96, 1.59x at d128, 1.71x at d256 and 1.94x at d512 (benchmarks/cpu_attention.py); with the bf16
  attention it was slower at d64-d128. :data:`BF16_FROM_WIDTH` is the narrowest width where it was measured faster
  *and* its held-out loss shown within 0.03 nat of fp32's (speed_equivalence_d64, docs/results.md); below it,
  fp32.
* **One arithmetic a rung.** The variants of one rung (a scale, or the whole suite without scales) are compared
  with each other, so under ``auto`` they all train in one arithmetic: where the rule's choices differ between
  them (mlp_ratio's matched variants sit at d48 and d76) every variant takes the slowest (fp32 if any is, eager if
  any is), and a variant added to a rung whose runs were already made follows them.
* **The attention.** PyTorch's CPU flash-attention kernel runs its bf16 backward ~3x slower than its fp32 one, so
  every bf16 path the sweep chooses or is forced to computes the attention in float32
  (``model.config.cpu_attention_fp32``: a d512 step 1.94x fp32's instead of 1.64x, benchmarks/cpu_attention.py).
* **Steps.** Compiling a bf16 step saved :data:`COMPILE_SAVING_S_PER_TOKEN` per token, measured at d256 and d512
  (5 % and 8 % of the eager step; not measured below :data:`COMPILE_FROM_WIDTH`, where the rule never compiles),
  against a compile of :data:`COLD_COMPILE_S` the first time a shape is compiled on a machine and
  :data:`WARM_COMPILE_S` once its cache entry exists (andrea_lab.fit.compile_cache). A sweep's fits of one
  shape share the cold compile; it is chosen where the steps save more than a fit's share of it.

:func:`choose` is the rule, a pure function; :func:`apply` puts its choice in each run's command (so it is in
``sweep-run.json``, and the fit records its precision and compile in ``summary.json``'s ``machine``), and
returns the line the sweep prints first. ``--speed config`` keeps what the suite's configs say; ``--speed
fp32``, ``bf16`` or ``bf16-compiled`` forces a path; a suite or ``--set`` that names ``trainer.precision`` or
``model.compile`` itself is never overridden. Compiled fp32 was not measured to pay here: the rule never
chooses it (``--set model.compile=true`` does).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.experiments.sweep.preflight import model_config_from, parsed_config
from andrea_lab.experiments.sweep.suite import SuiteError, override_args
from andrea_lab.files import read_json
from andrea_lab.runs import machine
from andrea_lab.runs.directory import START_MARKER

#: The narrowest model for which bf16-mixed (attention in fp32) was measured faster than fp32 with bf16 units and its
#: loss shown equivalent (experiments/suites/speed_equivalence_d64.yaml; 256 while the bf16 attention was used).
BF16_FROM_WIDTH = 64
#: Seconds a compiled bf16-mixed step (its attention in fp32, as the sweep's bf16 path) saved per token over the
#: eager one, by the width it was measured at: benchmarks/cpu_precision.py at the ladder's shape (6 blocks, batch
#: 64 x 64, vocab 257), 1 thread as each job of a -j 2 sweep has, with a -j 2 sweep beside it (AVX512-BF16 EPYC,
#: 2026-12-07; docs/performance.md): 953.3 against 901.9 ms a step at d256, 3188.6 against 2948.3 ms at d512. (The
#: 97 ms a step measured before was against the bf16 attention kernel, which the sweep no longer runs.) A rung
#: takes the saving of the widest width measured at or below its own.
COMPILE_SAVING_S_PER_TOKEN = {256: 0.0514 / (64 * 64), 512: 0.2403 / (64 * 64)}
#: The narrowest model at which a compiled bf16 step's saving was measured; the rule never compiles below it.
COMPILE_FROM_WIDTH = min(COMPILE_SAVING_S_PER_TOKEN)
#: A fit's compile with an empty cache: the median of three cold compiled d256 fits (summary.json's
#: ``machine.compile.compile_s``: 129.7 s in speed_equivalence, 132.4 s and 135.6 s on 2026-12-07).
COLD_COMPILE_S = 132.0
#: A fit's compile once the shape's entry exists: the median of three warm compiled d256 fits (8.3-8.6 s, 2026-12-07,
#: beside a -j 2 sweep), each loading its graphs from the FX-graph and AOTAutograd caches. Before the fp32
#: attention left autocast contexts out of the graph, AOTAutograd's cache bypassed it and a warm compile took
#: 25-35 s (docs/performance.md, "The compile rule, measured again").
WARM_COMPILE_S = 8.6
SPEEDS = ("auto", "config", "fp32", "bf16", "bf16-compiled")
#: What each forced speed sets.
FORCED = {"fp32": ("32-true", False), "bf16": ("bf16-mixed", False), "bf16-compiled": ("bf16-mixed", True)}
OWN_KEYS = ("trainer.precision", "model.compile")
#: Set with every bf16 path the sweep chooses: the CPU's bf16 attention kernel is slower than its fp32 one.
ATTENTION_KEY = "model.config.cpu_attention_fp32"


@dataclass(frozen=True)
class Rung:
    """What the rule needs of one shape a sweep trains."""

    d_model: int
    steps: int
    tokens_per_step: int
    fits: int = 1  # how many of the sweep's fits train this shape (they share its cold compile)
    precision: str = "32-true"  # what its config says: a choice equal to it leaves the command as it is
    compile: bool = False
    cpu_attention_fp32: bool = False
    on_cpu: bool = True  # the rule is measured on CPUs: a rung trained elsewhere keeps what its config says
    cache_warm: bool = False  # this user's compile cache already holds the shape at bf16-mixed


@dataclass(frozen=True)
class Tabled:
    """What a committed table (``--from-table``) recorded of one of its runs' paths."""

    precision: str  # "": a table from before runs recorded their precision (made as the config said)
    compiled: Optional[bool] = None  # None: the table does not say (tables before runs.csv's ``compiled``)


@dataclass(frozen=True)
class SpeedPath:
    """A rung's precision (Lightning's name; empty: as its config says) and compile, and why."""

    precision: str
    compile: bool
    reason: str
    cpu_attention_fp32: bool = False  # AndreaConfig.cpu_attention_fp32: with bf16-mixed, the attention in fp32

    @property
    def name(self) -> str:
        precision = machine.precision_name(self.precision)
        compiled = ", compiled" if self.compile else ""
        return f"{precision}{compiled}{', fp32 attention' if self.cpu_attention_fp32 else ''}"


def choose(bf16_units: bool, rung: Rung) -> SpeedPath:
    """The fastest measured path for ``rung`` on a CPU with (or without) bf16 units. Its loss equivalence to fp32
    eager is shown at d64 (speed_equivalence_d64, eager) and at d256 (speed_equivalence, eager and compiled)."""
    if not bf16_units:
        return SpeedPath("32-true", False, "this CPU has no bf16 units (AMX, AVX512-BF16): bf16 would be emulated")
    if rung.d_model < BF16_FROM_WIDTH:
        why = f"d_model {rung.d_model} < {BF16_FROM_WIDTH}: bf16 not measured faster there"
        return SpeedPath("32-true", False, why)
    if rung.d_model < COMPILE_FROM_WIDTH:
        units = f"d_model {rung.d_model} >= {BF16_FROM_WIDTH} with bf16 units"
        why = f"{units}; eager: a compile's saving was measured from d{COMPILE_FROM_WIDTH}"
        return SpeedPath("bf16-mixed", False, why, cpu_attention_fp32=True)
    measured_at = max(width for width in COMPILE_SAVING_S_PER_TOKEN if width <= rung.d_model)
    saving = rung.steps * rung.tokens_per_step * COMPILE_SAVING_S_PER_TOKEN[measured_at]
    cost = WARM_COMPILE_S + (0.0 if rung.cache_warm else COLD_COMPILE_S / max(1, rung.fits))
    why = (
        f"d_model {rung.d_model} >= {BF16_FROM_WIDTH} with bf16 units; compiling saves ~{saving:.0f} s a fit "
        f"({rung.steps} steps) against ~{cost:.0f} s of compile a fit"
    )
    return SpeedPath("bf16-mixed", saving > cost, why, cpu_attention_fp32=True)


def _forced(speed: str) -> SpeedPath:
    precision, compiled = FORCED[speed]
    return SpeedPath(precision, compiled, f"--speed {speed}", cpu_attention_fp32=precision == "bf16-mixed")


def apply(
    specs: Sequence[RunSpec],
    speed: str,
    rung_of: Callable[[RunSpec], Optional[Rung]],
    bf16_units: bool,
    recorded: Callable[[RunSpec], Optional[dict]] = lambda spec: _marker_overrides(spec),
    siblings: Sequence[RunSpec] = (),
    tabled: Callable[[RunSpec], Optional[Tabled]] = lambda spec: None,
) -> tuple[list[RunSpec], Optional[str]]:
    """The specs with each rung's path in its command, and the line that says what was chosen and why (None
    for ``config``). ``rung_of`` reads a spec's model and steps (the preflight's parser, once per rung). Under
    ``auto`` a rung with a run already started (``recorded``: its marker's overrides) keeps the path its runs were
    made with, as the config says or as an earlier sweep chose: the sweep neither counts as done nor overwrites
    runs made with other settings. ``siblings`` are the suite's other runs of the same rungs, not planned this
    time (``--variants``, ``--lrs``, ``--seeds``): their runs made count, and their variants share the path.
    ``tabled``: the path a committed table (``--from-table``) recorded for a run; its rows count as runs made."""
    if speed == "config":
        return list(specs), None
    planned = {spec.run_dir for spec in specs}
    every = [*specs, *(spec for spec in siblings if spec.run_dir not in planned)]
    fits = Counter(_shape(spec) for spec in every)  # a shape's fits share its cold compile, over the suite's life
    chosen: dict[Any, tuple[SpeedPath, bool]] = {}  # shape -> (its path, whether that changes its command)
    rungs: dict[Any, Optional[Rung]] = {}  # the shapes whose path the rule chose under auto, and their rungs
    made: list[Any] = []  # the shapes with runs already started
    for spec in every:
        key = _shape(spec)
        if key in chosen:
            continue
        if any(name in spec.overrides for name in (*OWN_KEYS, ATTENTION_KEY)):
            chosen[key] = (SpeedPath("", False, "set by the suite or --set"), False)
        elif speed == "auto" and (earlier := _made(every, key, recorded)) is not None:
            chosen[key] = earlier
            made.append(key)
        elif speed == "auto" and (found := _tabled(every, key, tabled)) is not None:
            chosen[key] = _as_table(found, rung_of(spec), fits[key], bf16_units)
            made.append(key)
        else:
            rung = rung_of(spec)
            chosen[key] = _choice(speed, rung, fits[key], bf16_units)
            if speed == "auto":
                rungs[key] = rung
    _one_arithmetic_a_rung(chosen, rungs, made)
    out = [_with_path(spec, path) if changes else spec for spec in specs for path, changes in [chosen[_shape(spec)]]]
    shown = {_shape(spec) for spec in specs}
    return out, "speed: " + "; ".join(_grouped({key: path for key, path in chosen.items() if key in shown}))


def _one_arithmetic_a_rung(
    chosen: dict[Any, tuple[SpeedPath, bool]], rungs: dict[Any, Optional[Rung]], made: Sequence[Any]
) -> None:
    """Make every variant of one rung (scale) that the rule chose for train as the rung's others do, in place:
    as the runs already made there, else on the slowest path chosen for any of them (fp32 before bf16, eager
    before compiled), so that a comparison between variants is never also one between arithmetics."""
    for scale in {key[0] for key in rungs}:
        free = [key for key in rungs if key[0] == scale]
        before = [key for key in made if key[0] == scale]
        if before:
            lead = before[0]
            path = dataclasses.replace(chosen[lead][0], reason=f"as {_label(lead)}'s runs were made, one path a rung")
        else:
            lead = min(free, key=lambda key: (chosen[key][0].precision.startswith("bf16"), chosen[key][0].compile))
            path = chosen[lead][0]
            if all(_same(chosen[key][0], path) for key in free):
                continue
            path = dataclasses.replace(path, reason=f"{path.reason}: {_label(lead)}'s, one path a rung")
        for key in free:
            chosen[key] = (path, _changes(path, rungs[key]))


def _changes(path: SpeedPath, rung: Optional[Rung]) -> bool:
    """Whether ``path`` changes the rung's command: not where it is "as the config says" (no precision) or the
    same arithmetic as the config; always where the config was not read."""
    return bool(path.precision) and (rung is None or not _same(path, rung))


def _same(path: SpeedPath, other: Any) -> bool:
    """Whether a path and another path or a rung's config train in one arithmetic."""
    return (
        _precision_word(path.precision) == _precision_word(other.precision)
        and path.compile == other.compile
        and path.cpu_attention_fp32 == other.cpu_attention_fp32
    )


def _label(key: Any) -> str:
    scale, variant = key
    return f"{scale} {variant}" if scale is not None else variant


def _marker_overrides(spec: RunSpec) -> Optional[dict]:
    """The overrides a started run was made with (its ``sweep-run.json``), None if it has not started."""
    marker = read_json(spec.run_dir / START_MARKER)
    return None if marker is None else dict(marker.get("overrides") or {})


def _made(
    specs: Sequence[RunSpec], key: Any, recorded: Callable[[RunSpec], Optional[dict]]
) -> Optional[tuple[SpeedPath, bool]]:
    """The path a rung's already-started runs were made with (None if none started): an earlier sweep's choice
    where their overrides hold one, else the config's."""
    for other in specs:
        if _shape(other) != key or (overrides := recorded(other)) is None:
            continue
        if all(name in overrides for name in OWN_KEYS):
            precision, compiled = str(overrides["trainer.precision"]), bool(overrides["model.compile"])
            attention = bool(overrides.get(ATTENTION_KEY, False))  # runs made before the key were made without it
            return SpeedPath(precision, compiled, "as its runs were made", attention), True
        return SpeedPath("", False, "runs already made as the config says"), False
    return None


def _tabled(specs: Sequence[RunSpec], key: Any, tabled: Callable[[RunSpec], Optional[Tabled]]) -> Optional[Tabled]:
    """The path a committed table recorded for one of the shape's runs (None: it holds none of them)."""
    return next((found for spec in specs if _shape(spec) == key and (found := tabled(spec)) is not None), None)


def _as_table(found: Tabled, rung: Optional[Rung], fits: int, bf16_units: bool) -> tuple[SpeedPath, bool]:
    """The path of a shape whose runs a committed table holds: its recorded precision, and its recorded compile
    where the table says (its ``compiled`` column). A table that does not say leaves the compile to the rule,
    asked as the sweep that made them asked it (``fits``: the shape's fits over the suite, which share its cold
    compile); the attention's arithmetic is the config's where the precision is, else the sweep's bf16 path's.
    Either way the sweep's witness run checks the path to the bit before anything else runs."""
    precision = found.precision
    if not precision:  # a table from before runs recorded their precision: they were made as the config said
        return SpeedPath("", False, "as the committed table's runs were made (as the config says)"), False
    why = f"as the committed table's runs were made ({machine.precision_name(precision)}"
    why += ")" if found.compiled is None else f", {'compiled' if found.compiled else 'eager'})"
    same_precision = rung is not None and _precision_word(precision) == _precision_word(rung.precision)
    if rung is None or (same_precision and found.compiled in (None, rung.compile)):
        return SpeedPath("", False, why), False
    attention = precision.startswith("bf16") and (not same_precision or rung.cpu_attention_fp32)
    if found.compiled is not None:
        path = SpeedPath(precision, found.compiled, why, cpu_attention_fp32=attention)
        return path, _changes(path, rung)
    path = choose(bf16_units, dataclasses.replace(rung, fits=fits))
    if _precision_word(path.precision) != _precision_word(precision):
        path = SpeedPath(precision, False, why, cpu_attention_fp32=attention)
    path = dataclasses.replace(path, reason=why)
    return path, _changes(path, rung)


def _choice(speed: str, rung: Optional[Rung], fits: int, bf16_units: bool) -> tuple[SpeedPath, bool]:
    """One rung's path, and whether it changes the rung's command (not where it is what the config says)."""
    if speed != "auto":
        path = _forced(speed)
    elif rung is None:
        return SpeedPath("", False, "its command was not read"), False
    elif not rung.on_cpu:
        return SpeedPath("", False, "not a CPU fit: the rule is measured on CPUs"), False
    else:
        path = choose(bf16_units, dataclasses.replace(rung, fits=fits))
    return path, _changes(path, rung)


def _shape(spec: RunSpec) -> tuple[Optional[str], str]:
    return spec.scale, spec.variant


def _precision_word(precision: str) -> str:
    """``32``, ``32-true`` and ``"32"`` are one precision to Lightning; so are ``bf16`` and ``bf16-mixed``."""
    text = str(precision)
    return {"32": "32-true", "bf16": "bf16-mixed"}.get(text, text)


def _with_path(spec: RunSpec, path: SpeedPath) -> RunSpec:
    own: dict[str, Any] = {"trainer.precision": path.precision, "model.compile": path.compile}
    if path.cpu_attention_fp32:  # only then: an fp32 path's command is as it was
        own[ATTENTION_KEY] = True
    return _with_overrides(spec, own)


def _with_overrides(spec: RunSpec, own: dict[str, Any]) -> RunSpec:
    """``spec`` with ``own`` added to its command and to the overrides its run records."""
    return dataclasses.replace(spec, command=(*spec.command, *override_args(own)), overrides={**spec.overrides, **own})


def as_sibling(spec: RunSpec, sibling: RunSpec) -> RunSpec:
    """``spec`` on the speed path the sweep gave ``sibling``, a run of the same rung and variant. Why: a run planned
    after the rule was applied (an LR ``extend_grid`` adds) must train in its cell's arithmetic, or the cell's
    grid mixes bf16 and fp32 and its best LR is chosen across arithmetics. Keys the spec already sets (a variant
    naming its own precision) stay as they are."""
    own = {key: sibling.overrides[key] for key in (*OWN_KEYS, ATTENTION_KEY) if key in sibling.overrides}
    own = {key: value for key, value in own.items() if key not in spec.overrides}
    return _with_overrides(spec, own) if own else spec


def _grouped(chosen: dict[Any, tuple[SpeedPath, bool]]) -> list[str]:
    """One phrase per distinct choice, naming the rungs (scale and variant) it applies to."""
    groups: dict[str, list[str]] = {}
    for (scale, variant), (path, _) in chosen.items():
        text = f"{path.name} ({path.reason})" if path.precision else f"as the config says ({path.reason})"
        groups.setdefault(text, []).append(_label((scale, variant)))
    return [f"{text} for {', '.join(where)}" for text, where in groups.items()]


def rung_of(spec: RunSpec) -> Rung:
    """The rung a planned run trains, read from its command by the preflight's parser (the base config and
    every override in order): the width, steps, tokens per step, and the precision and compile it sets."""
    from andrea_lab.fit import compile_cache  # torch: only when the rule is asked (--dry-run --no-check: never)

    config = parsed_config(spec.fit_args)
    model = dataclasses.asdict(model_config_from(config))
    batch = int(config["data.batch_size"])
    block = config.get("data.block_size") or config["model.config.block_size"]
    return Rung(
        d_model=int(config["model.config.d_model"]),
        steps=int(config["trainer.max_steps"]),
        tokens_per_step=batch * int(block),
        precision=str(config["trainer.precision"]),
        compile=bool(config["model.compile"]),
        cpu_attention_fp32=bool(config.get(ATTENTION_KEY) or False),
        on_cpu=str(config["trainer.accelerator"]) == "cpu",
        cache_warm=compile_cache.is_warm(model, "bf16-mixed"),
    )


def for_sweep(
    specs: Sequence[RunSpec],
    speed: str,
    parse: bool = True,
    siblings: Sequence[RunSpec] = (),
    tabled: Callable[[RunSpec], Optional[Tabled]] = lambda spec: None,
) -> tuple[list[RunSpec], Optional[str]]:
    """:func:`apply` with this machine's CPU and the preflight's parser: what ``andrea sweep --speed`` does.
    Without ``parse`` (``--no-check``) ``auto`` keeps the configs' paths and a forced path is put in every
    command; a command that does not parse keeps its config's path (the preflight then says what is wrong).
    ``siblings``: the suite's whole plan of the same rungs; ``tabled``: a committed table's precisions
    (:func:`apply`)."""
    if speed == "config" or (speed == "auto" and not parse):
        return list(specs), None if speed == "config" else "speed: as the configs say (--no-check: no rule)"

    def read(spec: RunSpec) -> Optional[Rung]:
        if not parse:
            return None
        try:
            return rung_of(spec)
        except (SuiteError, KeyError, TypeError, ValueError):
            return None

    return apply(specs, speed, read, this_cpu_has_bf16_units(), siblings=siblings, tabled=tabled)


def this_cpu_has_bf16_units() -> bool:
    """Whether this machine's CPU lists AMX or AVX512-BF16 (andrea_lab.runs.machine reads /proc/cpuinfo)."""
    return machine.has_bf16_units(machine.cpu_description()["bf16_flags"])
