"""Each variant's tuning budget beside its result, and no ranking of variants tuned with unequal effort.

A suite's ``search:`` (:mod:`andrea_lab.experiments.sweep.search_runs`) leaves ``<suite>/search.json``: per
(scale, variant) the declared budget in hyperparameter points, the points spent, why the descent stopped, the
best point and each key's values tried. A variant tuned over an LR grid instead spent one point per LR it ran.
Why the refusal: Wen et al. 2025 found optimizer speed-ups of 1.4-2x shrinking to about 1.1x once every
optimizer was tuned as hard as the baseline; a ranking between variants tuned with different budgets measures
the tuning as much as the variants. So ``andrea compare`` refuses it, in one line naming each variant's
budget, unless the suite says ``unequal_budgets_ok: true``.

Which number is compared: the budget a variant was given, not the points it spent. A descent that stopped
because no key improved had the budget to go on and found nothing better; one stopped by its budget is said
so ("budget spent") beside its result, and both numbers are printed.

A tuned value at the lowest or highest of the values its key tried is an optimum not found (the rule of
:func:`andrea_lab.experiments.compare.optimum_edges.edge_of`, which the LR grid's check uses): the table says
which key and which way to extend its values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare.optimum_edges import SEARCH_EDGE, edge_of
from andrea_lab.files import HandedFileError, load_json, write_json_atomic

RECORD = "search.json"
FIELDS = ("variant", "budget", "spent", "reason", "best", "values")
#: How a variant was tuned: by the suite's search, or over the suite's LR grid (one point per LR it ran).
SEARCH, GRID = "search", "LR grid"
#: The budget table's columns (:func:`budgets`), in the order comparison.md shows them.
COLUMNS = ("scale", "variant", "tuned", "budget", "spent", "reason", "best", "optimum_not_found")


def record_path(source: Path) -> Path:
    """Where the search record of ``source`` lies: in a suite's runs directory, or beside a committed table's
    ``runs.csv`` (compare's ``--out`` keeps it there: :func:`keep_record`), since the tuned values that decide
    whether an optimum was found are not columns of the table."""
    source = Path(source)
    return (source.parent if source.is_file() else source) / RECORD


def keep_record(source: Path, out: Path) -> Optional[Path]:
    """Copy the search record of ``source`` beside the runs.csv written in ``out`` (None where there is none):
    without it, a comparison of the committed table (the project's, or ``andrea compare runs.csv``) would judge
    a claim whose tuned value sits at an edge of what its search tried."""
    record = record_path(source)
    if not record.is_file():
        return None
    kept = Path(out) / RECORD
    if kept.resolve() != record.resolve():
        write_json_atomic(kept, load_json(record, "search record"))
    return kept


def read_searches(source: Path) -> list[dict[str, Any]]:
    """The searches recorded for ``source`` (a suite's directory, or a committed runs.csv: :func:`record_path`);
    none without ``search.json``. A record that is not one (a handed file) is a ValueError naming it."""
    path = record_path(source)
    if not path.is_file():
        return []
    try:
        entries = load_json(path, "search record")["searches"]
        for entry in entries:
            missing = [name for name in FIELDS if name not in entry]
            if missing or not isinstance(entry["budget"], int) or not isinstance(entry["values"], dict):
                raise ValueError(f"an entry lacks {', '.join(missing) or 'a whole-number budget'}")
    except (HandedFileError, KeyError, TypeError, ValueError) as problem:
        raise ValueError(f"{path}: not a search record ({problem}); move it away to compare without it") from None
    return list(entries)


def edges(entry: dict[str, Any]) -> list[str]:
    """``model.lr at the highest of 1e-3..4e-3: extend above``, per tuned key whose best is at an edge."""
    found = []
    for key, values in entry["values"].items():
        best = entry["best"].get(key)
        edge = None if best is None else edge_of(float(best), [float(v) for v in values])
        if edge is not None:
            way = "above" if edge == "highest" else "below"
            found.append(f"{key} {best:g} at the {edge} of its values ({min(values):g}..{max(values):g}): extend {way}")
    return found


def budgets(searches: Sequence[dict[str, Any]], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (scale, variant): how it was tuned (``search`` or ``LR grid``), its budget in points (a
    search's declared budget, else the LRs its runs tried), the points spent, why the search stopped, its best
    point and any optimum not found (a grid's row leaves the last three empty)."""
    rows = []
    searched = {(entry.get("scale"), entry["variant"]): entry for entry in searches}
    scale_of = runs["scale"] if "scale" in runs else pd.Series([None] * len(runs), index=runs.index)
    for (scale, variant), group in runs.groupby([scale_of.where(scale_of.notna(), None), "variant"], dropna=False):
        cell = (None if pd.isna(scale) else scale, variant)
        entry = searched.get(cell)
        if entry is None:
            lrs = int(group["lr"].dropna().nunique())
            rows.append({"scale": cell[0], "variant": variant, "tuned": GRID, "budget": lrs, "spent": lrs})
            continue
        rows.append(
            {
                "scale": cell[0],
                "variant": variant,
                "tuned": SEARCH,
                "budget": entry["budget"],
                "spent": entry["spent"],
                "reason": entry["reason"],
                "best": ", ".join(f"{key} {value:g}" for key, value in entry["best"].items()),
                "optimum_not_found": "; ".join(edges(entry)),
            }
        )
    return pd.DataFrame(rows).reindex(columns=COLUMNS).fillna({name: "" for name in COLUMNS[-3:]})


def with_edges(runs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with :data:`SEARCH_EDGE` on each run of a (scale, variant) whose tuned value is at an edge, so
    that a claim resting on that variant's optimum is not judged (optimum_edges.claim_edges)."""
    out = runs.copy()
    out[SEARCH_EDGE] = ""
    scale_of = out["scale"] if "scale" in out else pd.Series([None] * len(out), index=out.index)
    for row in table.itertuples():
        if text := row.optimum_not_found:
            same_scale = scale_of.isna() if row.scale is None or pd.isna(row.scale) else scale_of == row.scale
            out.loc[same_scale & (out["variant"] == row.variant), SEARCH_EDGE] = text
    return out


def with_recorded_edges(runs: pd.DataFrame, source: Path) -> pd.DataFrame:
    """``runs`` of a committed table (or a suite's directory) marked by the edges of its search record
    (:func:`record_path`), as compare judged them; unchanged where the suite did not search."""
    searches = read_searches(source)
    return with_edges(runs, budgets(searches, runs)) if searches else runs


def refusal(table: pd.DataFrame, unequal_ok: bool) -> Optional[str]:
    """The one line refusing to rank the variants of a scale whose budgets differ (None: equal, or the suite
    says ``unequal_budgets_ok: true``)."""
    if unequal_ok or table.empty:
        return None
    for scale, group in table.groupby(table["scale"].fillna(""), sort=False):
        if group["budget"].nunique() > 1:
            listed = ", ".join(f"{row.variant} {row.budget}" for row in group.itertuples())
            where = f" at {scale}" if scale else ""
            return (
                f"the variants{where} were tuned with different budgets (points: {listed}), so the better-tuned one "
                "would be favoured; give every variant the same search budget, or say it is on purpose with "
                "`unequal_budgets_ok: true` in the suite"
            )
    return None


def lines(table: pd.DataFrame) -> list[str]:
    """What compare prints: each cell's budget beside how it was tuned, and each optimum not found."""
    out = []
    for row in table.itertuples():
        where = f"{row.scale} {row.variant}" if row.scale else row.variant
        how = f"{SEARCH} ({row.reason}): {row.best}" if row.tuned == SEARCH else row.tuned
        out.append(f"tuning budget: {where}: {row.budget} points, {row.spent} spent; {how}")
        if row.optimum_not_found:
            out.append(f"optimum not found: {where}: {row.optimum_not_found}")
    return out
