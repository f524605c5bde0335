"""``andrea sweep --search-record FILE``: a search carried over from an earlier session's committed record.

Why: each session here starts from a fresh clone, so ``runs/`` (and with it every tuning run a search made) goes
with it, and a suite whose search needs more hours than a session (optimizers_tuned: about 3 h at -j 2) could
never end. The descent needs nothing of a finished point but its loss (:func:`andrea_lab.experiments.sweep.search.
next_step` replays it from the losses alone), and the sweep writes every point's loss into ``<suite>/search.json``,
for cells still searching too (their ``reason`` is "in progress"). Committed, that record carries the search: a
later sweep given it reads each recorded point's loss from it instead of rerunning its tuning runs, and goes on
from there.

The record is trusted only where this machine reproduces it: the first recorded point the replay meets, the
*witness*, is rerun before anything else, and its loss must equal the record's to the bit (the same machine kind
and torch rerun a fit bit-identically; compare's ``--from-table`` rests on the same). One that differs stops the
search before any other run: points chosen on another machine's losses would not be this machine's path. Only the
tuning points come from the record: the judged runs (each cell's best point at the judged seeds) are made by this
sweep, or read from a committed runs table with ``--from-table``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from andrea_lab.experiments.sweep.search import Point, Search
from andrea_lab.experiments.sweep.suite import Suite, SuiteError
from andrea_lab.files import HandedFileError, load_json

Cell = tuple[Optional[str], str]
#: A cell entry's finished points that are not on its path (yet): kept so that a later session need not rerun them.
EARLIER = "earlier_points"
#: The score a record's losses are (its ``score``): what the search chooses on, compare's choosing score
#: (:func:`andrea_lab.experiments.sweep.grid_extension.choosing_loss`). Records before it say none: theirs was
#: :data:`OLD_SCORE`, which held the test documents too, so their paths cannot be replayed on today's score.
SCORE = "the held-out selection part's loss, capped at the loss at init"
OLD_SCORE = "the whole held-out set's loss (records before 2026-12-07, which chose on the test documents too)"


@dataclass
class SearchLedger:
    """The recorded points' losses per cell, and the witness that must reproduce one of them first (``path``
    None: no record was given, and the ledger stands for nothing)."""

    path: Optional[Path]
    losses: dict[Cell, dict[Point, float]]
    witness: Optional[tuple[Cell, Point]] = None
    checked: bool = False
    refusal: Optional[str] = None
    read: dict[Cell, set[Point]] = field(default_factory=dict)  # the points each cell took from the record

    def holds(self, cell: Cell) -> bool:
        """Whether the record holds any finished point of ``cell``."""
        return cell in self.losses

    def loss(self, cell: Cell, point: Point) -> Optional[float]:
        """The recorded loss that stands for the point's runs; None where they must run (not recorded, or the
        witness: the first recorded point asked for)."""
        recorded = self.losses.get(cell, {}).get(point)
        if recorded is None:
            return None
        if self.witness is None:
            self.witness = (cell, point)
        if self.witness == (cell, point):
            return None
        self.read.setdefault(cell, set()).add(point)
        return recorded

    def check(self, cell: Cell, point: Point, loss: float) -> None:
        """Compare the witness's rerun loss with the record's, once (other points: nothing to check)."""
        if self.checked or self.witness != (cell, point):
            return
        self.checked = True
        recorded = self.losses[cell][point]
        if loss != recorded:
            where = " ".join(part for part in cell if part is not None)
            self.refusal = (
                f"--search-record {self.path}: the witness {where} {dict(point)} reran to a loss of {loss!r} where "
                f"the record has {recorded!r}: this machine or torch does not rerun the recorded search, so its "
                "path would not be this machine's; run the search without --search-record"
            )

    @property
    def waiting(self) -> bool:
        """Whether the witness is chosen and has not yet reproduced its loss (nothing else runs meanwhile)."""
        return self.witness is not None and not self.checked


def read_ledger(path: str | Path, suite: Suite) -> SearchLedger:
    """The finite point losses of ``suite``'s cells in the search record at ``path``; SuiteError (one line) when
    it is not a search record of this suite's searches (another variant, other keys, other tuning seeds)."""
    path = Path(path)
    if not suite.searches:
        raise SuiteError(f"--search-record {path}: {suite.path} has no search:, so there is no search to carry on")
    try:
        document = load_json(path, "search record")
        entries = document["searches"]
        losses = {(entry.get("scale"), entry["variant"]): _points(entry, suite) for entry in entries}
    except (HandedFileError, KeyError, TypeError, ValueError) as problem:
        raise SuiteError(f"--search-record {path}: not a search record of {suite.name} ({problem})") from None
    if document.get("score") != SCORE:
        raise SuiteError(
            f"--search-record {path}: its losses are {document.get('score') or OLD_SCORE}, not {SCORE} that this "
            "sweep chooses on, so its path is not this sweep's; run without --search-record (runs on disk are reused)"
        )
    return SearchLedger(path, {cell: points for cell, points in losses.items() if points})


def _points(entry: dict[str, Any], suite: Suite) -> dict[Point, float]:
    search = suite.searches.get(entry["variant"])
    if search is None:
        raise ValueError(f"variant {entry['variant']!r} does not search in this suite")
    return recorded_points(entry, search)


def recorded_points(entry: dict[str, Any], search: Search) -> dict[Point, float]:
    """Every finished point of a record's cell entry with its loss: those on its path and those run earlier off
    it (``earlier_points``: a search whose rule changed, an amended budget or extension, leaves its earlier
    path's points behind, and the record keeps them so that no finished run has to be made again). ValueError
    when the entry is not one of ``search``'s (other tuning seeds, other keys)."""
    if [int(seed) for seed in entry["tuning_seeds"]] != list(search.tuning_seeds):
        raise ValueError(f"{entry['variant']}: tuning seeds {entry['tuning_seeds']} are not the suite's")
    described = [point for step in entry["path"] for point in step["points"]] + list(entry.get(EARLIER, []))
    points: dict[Point, float] = {}
    for each in described:
        values, loss = each["point"], each["loss"]
        if set(values) != set(search.keys):
            raise ValueError(f"{entry['variant']}: a point of keys {sorted(values)}, not {sorted(search.keys)}")
        if loss is not None and math.isfinite(float(loss)):  # None: not run yet, or no score (run again)
            points[search.point(values)] = float(loss)
    return points
