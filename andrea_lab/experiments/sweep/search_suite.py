"""A suite's ``search:`` (issue 55, item 2): which hyperparameters each variant tunes, by coordinate descent.

::

    search:                       # the suite's: every variant tunes these
      keys: {model.lr: [1.0e-3, 2.0e-3, 4.0e-3], model.weight_decay: [0.05, 0.1, 0.2]}
      base: {model.lr: 2.0e-3, model.weight_decay: 0.1}
      budget: 8                   # hyperparameter points per variant, each run at every tuning seed
      tuning_seeds: [900, 901]    # judged seeds: the suite's seeds:, which must differ from these
      max_extensions: 2           # optional: a best value at an edge gets up to 2 values beyond it (factor: 2)
    unequal_budgets_ok: false     # true: compare ranks variants searched with different budgets
    variants:
      - name: muon
        search:                   # its own keys added to the suite's (and its own base values)
          keys: {model.muon_momentum: [0.9, 0.95, 0.98]}
          base: {model.muon_momentum: 0.95}
          upper_bounds: {model.muon_momentum: 1.0}   # extended in 1 - momentum: 0.99 beyond 0.98, 0.8 below 0.9

A variant's ``search:`` merges into the suite's (its keys, base values and upper bounds added or replaced), so the
shared hyperparameters are declared once and an optimizer's own ones beside it. Why the budget is the
suite's unless a variant restates it: equal effort is what makes two tuned variants comparable (Wen et al.
2025), and ``andrea compare`` refuses to rank variants whose budgets differ unless the suite says
``unequal_budgets_ok: true``; a restated budget is allowed so that such a suite can be written on purpose.

The judged seeds are the suite's ``seeds:``; the tuning seeds must not be among them (the search's choice
would otherwise be judged on the runs it was chosen on). Keys are dotted ``andrea fit`` keys; whether the fit
has them is checked by the sweep's preflight, which parses each variant's first command (carrying every tuned
key at its base value) with the fit's own parser before any run. A key's last component names it in run
directories, so two tuned keys may not share it. ``max_extensions`` and ``factor`` (checked as ``extend_grid:``'s)
let a key whose best value sits at an edge of its values gain values beyond it, within the budget
(:func:`andrea_lab.experiments.sweep.search.next_step`); a key with 0 or a negative value is not extended.
A key bounded above (Muon's momentum, below 1) names its bound in ``upper_bounds`` and is extended in its
distance to it, never past it: without the bound, 0.98 doubled is a run the fit refuses, and that cell's
search would stop there.
Each message is one line naming the suite and the value.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Sequence

from andrea_lab.experiments.sweep.extend_grid import EXTEND_GRID_KEYS, parse_extend_grid
from andrea_lab.experiments.sweep.search import Search, parse_search
from andrea_lab.experiments.sweep.suite_keys import SuiteError, check_section

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
#: Keys the sweep owns that a search may not tune (the LR, ``model.lr``, it may: the search sets it per point).
_NOT_TUNABLE = ("seed_everything", "data.seed", "trainer.logger", "config", "ckpt_path")
MERGED_KEYS = ("keys", "base", "upper_bounds")
OWN_KEYS = (*MERGED_KEYS, "budget", "tuning_seeds", *EXTEND_GRID_KEYS)


class DottedKeys:
    """The keys a search may name before the fit's parser is consulted: any dotted key but the sweep's own.
    (The fit's parser takes seconds to build; the preflight runs it on every variant's first command.)"""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and bool(_DOTTED.match(key)) and not key.startswith(_NOT_TUNABLE)

    def __iter__(self) -> Iterator[str]:
        return iter(("model.lr", "model.weight_decay", "model.warmup_steps", "model.beta2", "..."))


def _merged(suite_search: Any, variant_search: Any, where: str) -> dict[str, Any]:
    """The suite's declaration with the variant's keys and base values added (its other entries replace)."""
    merged = dict(suite_search or {})
    for name in MERGED_KEYS:
        mine, theirs = (variant_search or {}).get(name), merged.get(name)
        if mine is not None and not isinstance(mine, dict):
            raise SuiteError(f"{where}: {name} must be a mapping of dotted keys, got {mine!r}")
        if isinstance(theirs, dict) and mine is not None:
            merged[name] = {**theirs, **mine}
        elif mine is not None:
            merged[name] = dict(mine)
    merged.update({k: v for k, v in (variant_search or {}).items() if k not in MERGED_KEYS})
    return merged


def _check_short_names(search: Search, where: str) -> None:
    seen: dict[str, str] = {}
    for key in search.keys:
        short = key.rsplit(".", 1)[-1]
        if short in seen:
            raise SuiteError(
                f"{where}: tuned keys {seen[short]!r} and {key!r} share the name {short!r} that run directories "
                "are named by; tune one of them"
            )
        seen[short] = key


def parse_searches(
    document: Mapping[str, Any], raw_variants: Sequence[Any], names: Sequence[str], seeds: Sequence[int], where: str
) -> dict[str, Search]:
    """Each searching variant's :class:`Search` (variant name -> search); empty when no search is declared.
    ``raw_variants``: the suite file's variant entries, in the order of ``names``."""
    suite_search = document.get("search")
    if suite_search is not None:
        check_section(suite_search, f"{where}: search", OWN_KEYS, _EXAMPLE)
    ok = document.get("unequal_budgets_ok", False)
    if not isinstance(ok, bool):
        raise SuiteError(f"{where}: unequal_budgets_ok must be true or false, got {ok!r}")
    searches = {}
    for name, raw in zip(names, raw_variants):
        own = raw.get("search") if isinstance(raw, dict) else None
        if suite_search is None and own is None:
            continue
        label = f"{where}: variant {name!r} search"
        if own is not None:
            check_section(own, label, OWN_KEYS, _EXAMPLE)
        declared = {**_merged(suite_search, own, label), "judged_seeds": list(seeds)}
        extend = {key: declared.pop(key) for key in EXTEND_GRID_KEYS if key in declared}
        option = parse_extend_grid(extend or None, label, {})  # the same ceiling and factor rules as extend_grid:
        beyond = {} if option is None else {"factor": option.factor, "max_extensions": option.max_extensions}
        search = parse_search(declared, label, DottedKeys(), **beyond)
        _check_short_names(search, label)
        searches[name] = search
    return searches


_EXAMPLE = "e.g. search: {keys: {model.lr: [1.0e-3, 2.0e-3]}, base: {model.lr: 1.0e-3}, budget: 4, tuning_seeds: [900]}"


def check_lrs(searches: Mapping[str, Search], grids: Mapping[str, Sequence[float]], where: str) -> None:
    """A searching variant that does not tune ``model.lr`` runs at one LR: with several, which one each point
    runs at would be a second, undeclared search."""
    for name, search in searches.items():
        if "model.lr" not in search.keys and len(grids[name]) != 1:
            raise SuiteError(
                f"{where}: variant {name!r} searches without model.lr and has {len(grids[name])} lrs; give it one "
                "LR (lrs: [...]) or tune model.lr in its search"
            )
