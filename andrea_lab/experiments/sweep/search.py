"""Coordinate descent over several hyperparameters of one variant (issue 55, item 1): its rule, without I/O.

::

    search:
      base: {lr: 1.0e-3, weight_decay: 0.1, warmup_steps: 50}
      keys: {lr: [5.0e-4, 1.0e-3, 2.0e-3], weight_decay: [0.03, 0.1, 0.3], warmup_steps: [0, 50, 200]}
      budget: 12            # hyperparameter points per variant (each run at every tuning seed)
      tuning_seeds: [0, 1]
      judged_seeds: [100, 101, 102, 103, 104]

Why coordinate descent (Wen et al. 2025, "Fantastic pretraining optimizers and where to find them"): an LR
grid alone tunes one optimizer's most sensitive knob and leaves the others at defaults written for AdamW,
so a comparison between optimizers rewards whichever the defaults happened to suit. Sweeping one key at a
time from a base point, moving to the best and repeating until no key improves or the budget is spent gives
each variant the same effort, counted in points, which compare can print beside its result.

The search is replayed from the losses recorded so far (:func:`next_step`), never from a state file: an
interrupted sweep resumes by reading its runs back, and each step is named by the key it swept and its
round (:meth:`Step.label`), for the runs' records to carry. This module is the rule and its checks, without
I/O; a suite declares its search in :mod:`andrea_lab.experiments.sweep.search_suite`, ``andrea sweep`` runs it
through :mod:`andrea_lab.experiments.sweep.search_runs`, and ``andrea compare`` prints each variant's budget
(:mod:`andrea_lab.experiments.compare.search_budgets`).

An optimum at the edge of a key's values gets one value beyond it by ``extend_grid``'s rule (the edge
times or divided by its factor, up to its ceiling), for keys whose values are all positive; a key
containing 0 or a negative value (warmup 0) is not extended. A key bounded above (a momentum, below 1) is
declared in ``upper_bounds`` and extended in its distance to the bound instead, the way its papers sweep it
(1 - beta: 0.1, 0.05, 0.02): beyond 0.98 comes 0.99, below 0.9 comes 0.8, so no extension reaches a value the
fit refuses, which would stop that cell's search mid-sweep. A key declared with whole numbers only (warmup
steps: ``[20, 40, 80]``, not ``[20.0, ...]``) stays whole: 5 halved is 2 (``round``), 1 halved is not extended.

What is refused here, one line each before any run: an empty space, a key without values or with a
non-finite value (unbounded), a budget missing or below the number of keys (not every key could be swept
once), a key the fit does not have (``fit_keys``: the fit's parser, as the preflight checks it), a base
outside its key's values, an upper bound on a key not tuned or not above all its values, and tuning seeds
that are also judged seeds (the judged seeds must be fresh).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Optional, Sequence

from andrea_lab.experiments.sweep import fit_parser
from andrea_lab.experiments.sweep.suite_keys import SuiteError, check_section, unknown_key_message

SEARCH_KEYS = ("base", "keys", "budget", "tuning_seeds", "judged_seeds", "upper_bounds")
EXAMPLE = "e.g. search: {base: {lr: 1.0e-3}, keys: {lr: [5.0e-4, 1.0e-3, 2.0e-3]}, budget: 4, ...}"

#: A point: each tuned key's value, sorted by key, so that equal points compare and hash equal.
Point = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Search:
    """One variant's declared search: the base point, each key's values, the budget in points, and seeds."""

    base: Mapping[str, float]
    keys: Mapping[str, tuple[float, ...]]
    budget: int
    tuning_seeds: tuple[int, ...]
    judged_seeds: tuple[int, ...]
    factor: float = 2.0
    max_extensions: int = 0
    #: Keys bounded above (exclusive): extended in their distance to the bound (:func:`_beyond_edge`).
    upper_bounds: Mapping[str, float] = field(default_factory=dict)
    #: Keys declared with whole numbers only (warmup steps): their extensions stay whole.
    whole_keys: frozenset[str] = frozenset()

    def point(self, values: Mapping[str, float]) -> Point:
        return tuple(sorted((key, float(values[key])) for key in self.keys))


@dataclass(frozen=True)
class Step:
    """What to run next: the points of one key's sweep (``round`` counts from 1) not yet run."""

    key: str
    round: int
    points: tuple[Point, ...]

    def label(self) -> str:
        """What each run's record says produced it."""
        return f"search round {self.round}, {self.key}"


@dataclass(frozen=True)
class Outcome:
    """The search's end: the best point, its loss, the points spent, and why it stopped."""

    best: Point
    loss: float
    spent: int
    reason: str
    extended: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def _require_values(where: str, key: str, values: Any) -> tuple[float, ...]:
    if not isinstance(values, list) or not values:
        raise SuiteError(f"{where}: key {key!r} needs a non-empty list of values, e.g. {key}: [0.5, 1, 2]")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SuiteError(f"{where}: key {key!r} has value {value!r}; each value must be a finite number")
    return tuple(sorted({float(value) for value in values}))


def _require_seeds(where: str, name: str, seeds: Any) -> tuple[int, ...]:
    if not isinstance(seeds, list) or not seeds or not all(type(seed) is int for seed in seeds):
        raise SuiteError(f"{where}: {name} {seeds!r} is not a non-empty list of whole numbers")
    return tuple(seeds)


def parse_search(
    value: Any, where: str, fit_keys: Collection[str], factor: float = 2.0, max_extensions: int = 0
) -> Search:
    """A variant's ``search:`` mapping, checked (``fit_keys``: the dotted keys the fit accepts)."""
    check_section(value, where, SEARCH_KEYS, EXAMPLE)
    declared = value.get("keys")
    if not isinstance(declared, dict) or not declared:
        raise SuiteError(f"{where}: keys {declared!r} is an empty search space; name at least one key, {EXAMPLE}")
    keys = {key: _require_values(where, key, values) for key, values in declared.items()}
    for key in keys:
        if key not in fit_keys:
            raise SuiteError(unknown_key_message(f"{where}.keys (the fit's keys)", key, sorted(fit_keys)))
    budget = value.get("budget")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < len(keys):
        raise SuiteError(
            f"{where}: budget {budget!r} is not a whole number of points >= {len(keys)} (the number of keys; "
            "without it the search is unbounded)"
        )
    base = value.get("base") or {}
    for key, values in keys.items():
        if base.get(key) not in values:
            raise SuiteError(f"{where}: base {key} {base.get(key)!r} is not one of its values {list(values)}")
    tuning = _require_seeds(where, "tuning_seeds", value.get("tuning_seeds"))
    judged = _require_seeds(where, "judged_seeds", value.get("judged_seeds"))
    shared = sorted(set(tuning) & set(judged))
    if shared:
        raise SuiteError(f"{where}: seeds {shared} are both tuning and judged seeds; judged seeds must be fresh")
    base_point = {key: float(base[key]) for key in keys}
    bounds = _require_upper_bounds(where, value.get("upper_bounds"), keys)
    whole = frozenset(key for key, values in declared.items() if all(type(v) is int for v in values))
    return Search(base_point, keys, budget, tuning, judged, factor, max_extensions, bounds, whole)


def _require_upper_bounds(where: str, declared: Any, keys: Mapping[str, tuple[float, ...]]) -> dict[str, float]:
    if declared is None:
        return {}
    if not isinstance(declared, dict):
        raise SuiteError(f"{where}: upper_bounds {declared!r} is not a mapping of tuned keys to bounds")
    bounds = {}
    for key, bound in declared.items():
        if key not in keys:
            raise SuiteError(f"{where}: upper_bounds names {key!r}, which is not tuned here (tuned: {list(keys)})")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            raise SuiteError(f"{where}: upper_bounds {key} {bound!r} is not a finite number")
        if max(keys[key]) >= bound:
            raise SuiteError(
                f"{where}: upper_bounds {key} {bound!r} is not above every value of it {list(keys[key])} "
                "(the bound is exclusive)"
            )
        bounds[key] = float(bound)
    return bounds


def _beyond_edge(search: Search, key: str, values: list[float], best: float, extensions: int) -> Optional[float]:
    """The value beyond the edge ``best`` sits at, or None (inside, ceiling reached, or not extendable)."""
    if extensions >= search.max_extensions or len(values) < 2 or min(values) <= 0:
        return None
    if best not in (values[0], values[-1]):
        return None
    outward = search.factor if best == values[-1] else 1 / search.factor
    bound = search.upper_bounds.get(key)
    if bound is None:
        beyond = best * outward
    else:  # in 1 - momentum; 0.99, not 0.9899999999999999 (it names runs)
        beyond = float(f"{bound - (bound - best) / outward:.12g}")
    if key in search.whole_keys:
        beyond = float(round(beyond))
    return beyond if beyond > 0 and beyond not in values else None  # a whole key halved from 1 ends there


def next_step(search: Search, losses: Mapping[Point, float]) -> Step | Outcome:
    """Replay the descent over ``losses`` (each point's selection loss, mean over its tuning seeds) and
    return the next key's points to run, or the outcome. Deterministic: ties keep the current point, keys
    are swept in the suite's order."""
    values = {key: list(vals) for key, vals in search.keys.items()}
    extensions = dict.fromkeys(values, 0)
    current = dict(search.base)
    spent = set(losses)  # this variant's search points only: each costs one run per tuning seed
    for round_ in range(1, search.budget + 1):
        moved = False
        for key in values:
            while True:
                candidates = [search.point({**current, key: value}) for value in values[key]]
                missing = [point for point in candidates if point not in losses]
                if missing:
                    room = search.budget - len(spent)
                    if room <= 0:
                        return _outcome(search, current, losses, len(spent), "budget spent", values)
                    return Step(key, round_, tuple(missing[:room]))
                here = search.point(current)
                best = min(candidates, key=lambda point: (losses[point], point != here))
                beyond = _beyond_edge(search, key, values[key], dict(best)[key], extensions[key])
                if beyond is None:
                    break
                values[key] = sorted(values[key] + [beyond])
                extensions[key] += 1
            if best != here:
                moved = True
                current = dict(best)
        if not moved:
            return _outcome(search, current, losses, len(spent), "no key improves", values)
    return _outcome(search, current, losses, len(spent), "budget spent", values)


def _outcome(
    search: Search, current: Mapping[str, float], losses: Mapping[Point, float], spent: int, reason: str, values
) -> Outcome:
    here = search.point(current)
    extended = {key: tuple(vals) for key, vals in values.items() if tuple(vals) != search.keys[key]}
    return Outcome(here, losses.get(here, math.nan), spent, reason, extended)


def fit_refusal(search: Search, fit_args: Sequence[str]) -> Optional[str]:
    """What ``andrea fit`` says to the variant's arguments with every tuned key at its base value (None: it
    accepts them), by the parser the preflight uses: a tuned key the fit does not have is refused here,
    before any run, rather than by the first run of the search."""
    args = list(fit_args)
    for key, value in search.base.items():
        args += [f"--{key}", repr(value)]
    error, _ = fit_parser.parse(args)
    return error
