"""A suite's ``ladder:``: its scales are rungs growing in training compute, and it names its decisions.

Why a section on top of ``scales:`` rather than a new axis: a rung *is* a scale (overrides of width, depth,
steps and batch; runs in ``<suite>/<rung>/<variant>/``), so everything the scale axis does (the preflight at
every scale, compare's report per scale) holds. What a ladder adds is what makes it a question about
proxies (docs/experiments.md "Ladders"):

* ``decisions``: the pairs of variants whose order the ladder asks about (``[pre, post]``); compare's decision
  accuracy (:mod:`andrea_lab.experiments.compare.ladder`) is the share of these whose sign at a lower rung
  matches the top rung's;
* ``grids``: a rung's own LR grid and seeds (``{d256: {lrs: [...], seeds: [...]}}``): the top rung is the
  costly one, so it gets a narrow grid placed from the lower rungs' optima and fewer seeds. ``lrs`` may map
  every variant to its own list (``{pre: [...], muon: [...]}``): each variant's bracket around its own
  best-LR trend, since Muon's optimum sits about 2x above AdamW's at d64 and d96 and one shared narrow
  bracket would put one of them at an edge;
* ``prediction``: the file of predictions for the top rung, written from the lower rungs, and its sha256
  (:mod:`andrea_lab.experiments.compare.ladder_predictions`).

Refused when the suite loads, one line each: a ladder without at least two scales, a decision naming a
variant the suite lacks (or a variant against itself, or twice), a grid for a rung the suite lacks or with
an unknown key, a prediction file missing or whose sha256, suite or top rung is not the suite's. Rungs that
do not grow in compute (6·N·D) are refused by :mod:`andrea_lab.experiments.sweep.ladder_compute` before any
run, since N and D come from each rung's parsed config.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from andrea_lab.experiments.sweep.suite_keys import SuiteError, check_mapping

LADDER_KEYS = ("decisions", "grids", "prediction")
GRID_KEYS = ("lrs", "seeds")
PREDICTION_KEYS = ("file", "sha256")
#: The most LR x seed cells one rung's own grid may plan (the suite's whole grid is capped at as many runs).
MAX_RUNG_CELLS = 10_000


@dataclass(frozen=True)
class Ladder:
    """The rungs are the suite's scales, in order, the last the top."""

    decisions: tuple[tuple[str, str], ...]
    #: rung name -> {"lrs": (...), "seeds": (...)}, either key optional: that rung's own grid.
    grids: dict[str, dict[str, tuple]] = field(default_factory=dict)
    prediction: Optional[Path] = None
    prediction_sha256: Optional[str] = None


def _mapping(raw: Any, keys: Sequence[str], where: str) -> dict:
    return check_mapping(raw, where, keys, f"must be a mapping with keys {', '.join(keys)},")


def _decisions(raw: Any, where: str, variants: Sequence[str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise SuiteError(f"{where}: decisions must be a non-empty list of [variant, variant] pairs, got {raw!r}")
    seen: set[tuple[str, str]] = set()
    for pair in raw:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(name, str) for name in pair)):
            raise SuiteError(f"{where}: decision {pair!r} is not a pair of variant names like [pre, post]")
        for name in pair:
            if name not in variants:
                raise SuiteError(
                    f"{where}: decision {pair} names {name!r}, not a variant; variants: {', '.join(variants)}"
                )
        if pair[0] == pair[1] or tuple(sorted(pair)) in seen:
            raise SuiteError(f"{where}: decision {pair} compares a variant with itself or is listed twice")
        seen.add(tuple(sorted(pair)))
    return tuple((a, b) for a, b in raw)


def _rung_lrs(raw: Any, where: str, variants: Sequence[str], parse_grid: Callable) -> Any:
    """A rung's ``lrs``: one list for every variant, or a mapping naming every variant with its own list (the
    top rung's bracket, placed per variant from the lower rungs' best-LR trend)."""
    if not isinstance(raw, dict):
        return parse_grid(raw, "lrs", where)
    missing = [name for name in variants if name not in raw]
    unknown = [str(name) for name in raw if name not in variants]
    if unknown or missing:
        problem = f"names {', '.join(unknown)}, not variants" if unknown else f"lacks {', '.join(missing)}"
        raise SuiteError(
            f"{where}: lrs per variant {problem}; a mapping of lrs names every variant: {', '.join(variants)}"
        )
    return {name: parse_grid(raw[name], "lrs", f"{where}: lrs: {name}") for name in variants}


def _grids(
    raw: Any, where: str, rungs: Sequence[str], seeds: Sequence[int], parse_grid: Callable, variants: Sequence[str]
) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: grids must map a rung to {{lrs: [...], seeds: [...]}}, got {raw!r}")
    grids = {}
    for rung, grid in raw.items():
        if rung not in rungs:
            raise SuiteError(f"{where}: grids names rung {rung!r}, not a scale; scales: {', '.join(rungs)}")
        grid = _mapping(grid, GRID_KEYS, f"{where}: grids: {rung}")
        lrs = grid.get("lrs")
        lists = list(lrs.values()) if isinstance(lrs, dict) else [lrs]
        cells = sum(len(each) for each in lists if isinstance(each, list)) * len(seeds)
        if cells > MAX_RUNG_CELLS:  # counted before any list is parsed, as the suite's own grid (suite.MAX_RUNS)
            raise SuiteError(f"{where}: grids: {rung}: {cells:,} LR x seed cells, more than {MAX_RUNG_CELLS:,}")
        grids[rung] = {}
        if "lrs" in grid:
            grids[rung]["lrs"] = _rung_lrs(lrs, f"{where}: grids: {rung}", variants, parse_grid)
        if "seeds" in grid:
            grids[rung]["seeds"] = parse_grid(grid["seeds"], "seeds", f"{where}: grids: {rung}")
        extra = sorted(set(grids[rung].get("seeds", ())) - set(seeds))
        if extra:  # a rung runs a subset of the suite's seeds (the run order and compare's pairing rely on it)
            raise SuiteError(f"{where}: grids: {rung}: seeds {extra} are not among the suite's seeds {list(seeds)}")
    return grids


def _prediction(raw: Any, where: str, suite: str, top: str, suite_dir: Path) -> tuple[Optional[Path], Optional[str]]:
    """The prediction file and its recorded sha256, checked against the suite (exists, same hash, same suite
    and top rung)."""
    if raw is None:
        return None, None
    raw = _mapping(raw, PREDICTION_KEYS, f"{where}: prediction")
    if not all(isinstance(raw.get(key), str) for key in PREDICTION_KEYS):
        raise SuiteError(f"{where}: prediction needs file and sha256 (strings), got {raw!r}")
    path = (suite_dir / raw["file"]).resolve()
    if not path.is_file():
        raise SuiteError(f"{where}: prediction file {path} does not exist; write it from the lower rungs first")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != raw["sha256"]:
        raise SuiteError(f"{where}: prediction file {path} has sha256 {actual}, not the {raw['sha256']} recorded")
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SuiteError(f"{where}: prediction file {path} is not JSON ({error})") from None
    made_for = (written.get("suite"), written.get("top_rung")) if isinstance(written, dict) else (None, None)
    if made_for != (suite, top):
        raise SuiteError(
            f"{where}: prediction file {path} is for suite {made_for[0]!r}, top rung {made_for[1]!r}; this suite "
            f"is {suite!r} with top rung {top!r}"
        )
    return path, raw["sha256"]


def parse_ladder(
    raw: Any,
    where: str,
    suite: str,
    scales: Sequence[Any],
    variants: Sequence[str],
    seeds: Sequence[int],
    parse_grid: Callable,
    suite_dir: Path,
) -> Optional[Ladder]:
    """The suite's ``ladder:`` checked (module docstring); None when it has none. ``parse_grid`` is the suite's
    own LR and seed list parser (:func:`andrea_lab.experiments.sweep.suite.parse_grid`)."""
    if raw is None:
        return None
    raw = _mapping(raw, LADDER_KEYS, f"{where}: ladder")
    rungs = [scale.name for scale in scales]
    if len(rungs) < 2:
        raise SuiteError(f"{where}: a ladder needs at least two rungs in scales:, got {len(rungs)}")
    prediction, sha256 = _prediction(raw.get("prediction"), f"{where}: ladder", suite, rungs[-1], suite_dir)
    return Ladder(
        decisions=_decisions(raw.get("decisions"), f"{where}: ladder", variants),
        grids=_grids(raw.get("grids"), f"{where}: ladder", rungs, seeds, parse_grid, variants),
        prediction=prediction,
        prediction_sha256=sha256,
    )


def rung_grid(ladder: Optional[Ladder], rung: Optional[str], key: str, handed: bool) -> Optional[tuple]:
    """A rung's own ``lrs`` or ``seeds`` where the ladder gives it and the command line did not (``--lrs`` and
    ``--seeds`` replace every grid); None: the suite's (or the variant's) grid."""
    if ladder is None or rung is None or handed:
        return None
    return ladder.grids.get(rung, {}).get(key)


def grids_at(grids: Mapping[str, tuple], rung_lrs: Any) -> dict[str, tuple]:
    """Every variant's LR grid at a rung: the rung's own grid replaces each variant's where it has one (one
    list for all, or each variant's own list)."""
    if rung_lrs is None:
        return dict(grids)
    return {name: rung_lrs[name] if isinstance(rung_lrs, dict) else rung_lrs for name in grids}
