"""Running ``extend_grid:`` (:mod:`andrea_lab.experiments.sweep.extend_grid`): LRs added beyond an edge optimum
until every optimum is inside its grid, and kept as part of the suite's record.

When the runner has no run left (:class:`andrea_lab.experiments.sweep.runner.Runner`'s ``extension``), each
(scale, variant) whose runs all ended is checked by the rule ``andrea compare`` judges claims by
(:func:`andrea_lab.experiments.compare.optimum_edges.optimum_edge`: the in-sample best LR, or any seed's
LR chosen on the other seeds, at the grid's lowest or highest LR), on the capped loss (a diverged run at its
loss at init) of the score compare chooses by (:func:`choosing_loss`: the held-out selection part). One LR
beyond that edge is planned at every seed of the cell, the runner runs them, and the check repeats, up to the
suite's ceiling per (scale, variant).

The record: every LR added is written to ``<runs-dir>/<suite>/grid-extensions.json`` (scale, variant, LR,
edge, which extension) before its runs start, and every later plan of the suite (a resumed sweep, ``--dry-run``)
includes those runs (:func:`with_recorded`), so that the plan lists what the suite's directory holds and
``andrea compare`` reads the added runs as the variant's grid. A variant extended and one not are tuned
with different budgets: a claim between them says ``unequal_budgets: true`` or is refused.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

from andrea_lab.data.judging_split import SELECTION
from andrea_lab.experiments.sweep.extend_grid import ExtendGrid
from andrea_lab.experiments.sweep.grid import parse_lr
from andrea_lab.experiments.sweep.plan import RunSpec, plan_sweep, suite_runs_dir
from andrea_lab.experiments.sweep.speed_path import as_sibling
from andrea_lab.experiments.sweep.suite import Suite, SuiteError
from andrea_lab.files import HandedFileError, load_json, write_json_atomic
from andrea_lab.runs.directory import (
    DONE_STATES,
    NONFINITE,
    RunRecord,
    format_lr,
    read_record,
    run_state,
    settings_difference,
)

RECORD = "grid-extensions.json"
#: The edges a grid is extended beyond.
EDGES = ("lowest", "highest")
Cell = tuple[Optional[str], str]  # (scale, variant)


class Recorded(NamedTuple):
    """A planned run's outcome read from a committed table instead of its directory: its state and capped loss."""

    state: str
    loss: float


@dataclasses.dataclass(frozen=True)
class Extension:
    """One LR added to one (scale, variant): beyond its ``edge`` ("lowest"/"highest"), the ``number``-th."""

    scale: Optional[str]
    variant: str
    lr: float
    edge: str
    number: int

    @property
    def cell(self) -> Cell:
        return (self.scale, self.variant)


def read_extensions(directory: Path, ceiling: int) -> list[Extension]:
    """The LRs earlier sweeps added (``<suite dir>/grid-extensions.json``); none without the file.

    The record lies in a runs directory, which a user can be handed: each LR must be one the suite itself could
    hold (:func:`~andrea_lab.experiments.sweep.grid.parse_lr`), each edge a real edge, and no (scale, variant)
    may carry more than the suite's own ``ceiling`` of them, so a record cannot plan past the suite's grid cap."""
    path = directory / RECORD
    if not path.is_file():
        return []
    try:
        entries = load_json(path, "grid-extension record")["extensions"]
        extensions = [
            Extension(e["scale"], e["variant"], parse_lr(e["lr"], "lr"), e["edge"], int(e["number"])) for e in entries
        ]
    except (HandedFileError, KeyError, TypeError, ValueError) as problem:
        raise SuiteError(
            f"{path}: not a grid-extension record ({problem}); move it away to plan the suite without the LRs it added"
        ) from None
    for extension in extensions:
        if extension.edge not in EDGES:
            raise SuiteError(f"{path}: edge {extension.edge!r} is not one of {', '.join(EDGES)}; move the record away")
    for (scale, variant), count in Counter(e.cell for e in extensions).items():
        if count > ceiling:
            where = f"{variant} at {scale}" if scale else variant
            raise SuiteError(
                f"{path}: {count} LRs for {where}; extend_grid adds at most {ceiling} (the suite's max_extensions): "
                "move the record away"
            )
    return extensions


def write_extensions(directory: Path, extensions: Sequence[Extension]) -> None:
    write_json_atomic(directory / RECORD, {"schema": 1, "extensions": [dataclasses.asdict(e) for e in extensions]})


def cells(specs: Sequence[RunSpec]) -> dict[Cell, list[RunSpec]]:
    """The planned runs by (scale, variant), in plan order."""
    grouped: dict[Cell, list[RunSpec]] = {}
    for spec in specs:
        grouped.setdefault((spec.scale, spec.variant), []).append(spec)
    return grouped


def renumbered(specs: Sequence[RunSpec], start: int, total: int) -> list[RunSpec]:
    return [dataclasses.replace(spec, index=start + n, total=total) for n, spec in enumerate(specs)]


def runs_at(suite: Suite, runs_dir: str | Path, cell_specs: Sequence[RunSpec], lr: float) -> list[RunSpec]:
    """The cell's runs at one more LR: the same variant, scale, seeds and interpreter as its planned runs."""
    first = cell_specs[0]
    return plan_sweep(
        suite,
        runs_dir,
        lrs=[lr],
        seeds=list(dict.fromkeys(spec.seed for spec in cell_specs)),
        variants=[first.variant],
        python=first.command[0],
        scales=None if first.scale is None else [first.scale],
    )


def with_recorded(suite: Suite, runs_dir: str | Path, specs: Sequence[RunSpec]) -> list[RunSpec]:
    """``specs`` and the runs of every LR earlier sweeps added to their cells (renumbered in order)."""
    if suite.extend_grid is None:
        return list(specs)
    planned = cells(specs)
    added: list[RunSpec] = []
    for extension in read_extensions(suite_runs_dir(runs_dir, suite), suite.extend_grid.max_extensions):
        cell_specs = planned.get(extension.cell)
        if cell_specs and format_lr(extension.lr) not in {format_lr(spec.lr) for spec in cell_specs}:
            added += runs_at(suite, runs_dir, cell_specs, extension.lr)
    every = [*specs, *added]
    return renumbered(every, 1, len(every))


def plan_lines(suite: Suite, specs: Sequence[RunSpec]) -> list[str]:
    """What the plan adds if optima sit at edges: the rule and the most runs it may add."""
    option: Optional[ExtendGrid] = suite.extend_grid
    if option is None:
        return []
    most = sum(len({spec.seed for spec in cell}) for cell in cells(specs).values()) * option.max_extensions
    return [f"{option.describe()}: at most {most} more runs"]


def capped_loss(run_dir: Path) -> float:
    """The run's loss as compare chooses by it (:func:`choosing_loss`), at most the loss at init (a diverged or
    non-finite run counts as its loss at init)."""
    record = read_record(run_dir)
    if record is None:
        return math.nan
    return capped(record.initial_val_loss, choosing_loss(record), record.divergence.get("kind") == NONFINITE)


def choosing_loss(record: RunRecord) -> Optional[float]:
    """The score a choice (a best LR, a tuned point) is made on, as ``andrea compare`` makes it
    (:func:`andrea_lab.experiments.compare.compare.scored_loss_column`): the held-out documents' selection part,
    so that the test part, on which verdicts are judged, never chooses what they compare; in records from before
    the split, the document-weighted held-out score, else the token-weighted one, else the last in-training
    loss. Choosing on the whole held-out set (as the sweep did until 2026-12-07) chose on the test documents too."""
    heldout = record.heldout
    if heldout is None:
        return record.final_val_loss
    selection = ((heldout.parts or {}).get(SELECTION) or {}).get("loss")
    return choosing_score(selection, heldout.document_loss, heldout.loss, record.final_val_loss)


def choosing_score(
    selection: Optional[float], by_document: Optional[float], whole: Optional[float], last: Optional[float]
) -> Optional[float]:
    """:func:`choosing_loss`'s order, from the numbers themselves (a run's record, or a committed runs.csv row's in
    :mod:`andrea_lab.experiments.sweep.from_table`): without a held-out score (``whole``), the last in-training
    loss; else the selection part, the document-weighted score, the token-weighted one, the first there is."""
    if whole is None:
        return last
    return next(score for score in (selection, by_document, whole) if score is not None)


def capped(initial: Optional[float], headline: Optional[float], nonfinite: bool) -> float:
    """:func:`capped_loss` from the numbers themselves: a run directory's, or a committed runs.csv row's
    (:mod:`andrea_lab.experiments.sweep.from_table`)."""
    if initial is None or not math.isfinite(initial):
        return math.nan
    if headline is None or not math.isfinite(headline) or nonfinite:
        return float(initial)
    return float(min(headline, initial))


def next_lr(variant: str, losses: dict[float, dict[int, float]], factor: float) -> Optional[tuple[float, str]]:
    """The LR beyond the edge where ``variant``'s optimum sits (``losses[lr][seed]``) and that edge, or None
    when every chosen optimum is inside the grid."""
    import pandas as pd  # the sweep starts without pandas and scipy; only an extension check loads them

    from andrea_lab.experiments.compare import optimum_edges, stats  # scipy, as above

    table = pd.DataFrame.from_dict(losses, orient="index").sort_index()
    if table.dropna(how="all").empty:
        return None
    edge = optimum_edges.optimum_edge(variant, list(table.index), stats.best_lr(table), stats.held_out_best_lrs(table))
    if edge is None:
        return None
    return (edge.lr * factor if edge.edge == "highest" else edge.lr / factor), edge.edge


class GridExtension:
    """The runner's ``extension``: called with every run planned so far once none is left to run, it returns
    the runs of one more LR for each (scale, variant) whose optimum is at an edge ([] when none is)."""

    def __init__(self, suite: Suite, runs_dir: str | Path, recorded: Optional[Mapping[Path, Recorded]] = None):
        assert suite.extend_grid is not None
        self.suite, self.runs_dir, self.option = suite, runs_dir, suite.extend_grid
        #: Planned runs not run here, whose state and capped loss a committed table holds (sweep.from_table).
        self.recorded: dict[Path, Recorded] = dict(recorded or {})  # grows as --from-table reads added LRs
        self.directory = suite_runs_dir(runs_dir, suite)
        self.extensions = read_extensions(self.directory, suite.extend_grid.max_extensions)
        self.settled: set[Cell] = set()

    def __call__(self, specs: Sequence[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
        added: list[RunSpec] = []
        for cell, cell_specs in cells(specs).items():
            if cell not in self.settled:
                more = self._extend(cell, cell_specs, say)
                if not more:
                    self.settled.add(cell)
                added += more
        if added:
            write_extensions(self.directory, self.extensions)
        return renumbered(added, len(specs) + 1, len(specs) + len(added))

    def _extend(self, cell: Cell, cell_specs: Sequence[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
        label = " ".join(part for part in cell if part is not None)
        outcomes = [self._outcome(spec) for spec in cell_specs]  # each run's record read once
        if any(state not in DONE_STATES for state, _ in outcomes):
            say(f"extend_grid: {label}: not every run ended, so its grid is not extended")
            return []
        losses: dict[float, dict[int, float]] = {}
        for spec, (_, loss) in zip(cell_specs, outcomes):
            losses.setdefault(spec.lr, {})[spec.seed] = loss
        found = next_lr(cell[1], losses, self.option.factor)
        if found is None:
            say(f"extend_grid: {label}: optimum inside its grid ({_grid(losses)})")
            return []
        lr, edge = found
        number = sum(1 for extension in self.extensions if extension.cell == cell)
        if number >= self.option.max_extensions:
            say(
                f"extend_grid: {label}: optimum still at the grid's {edge} LR ({_grid(losses)}) after "
                f"{number} extension(s), the suite's ceiling; compare will not judge claims on it"
            )
            return []
        more = [as_sibling(spec, cell_specs[0]) for spec in runs_at(self.suite, self.runs_dir, cell_specs, lr)]
        stale = next((spec for spec in more if settings_difference(spec.run_dir, list(spec.command))), None)
        if stale is not None:
            say(f"extend_grid: {label}: {stale.run_dir} holds a run made with other settings; not extended")
            return []
        self.extensions.append(Extension(cell[0], cell[1], lr, edge, number + 1))
        say(
            f"extend_grid: {label}: best LR at the grid's {edge} ({_grid(losses)}): adding {format_lr(lr)} "
            f"(extension {number + 1} of at most {self.option.max_extensions}), {len(more)} runs"
        )
        return more

    def _outcome(self, spec: RunSpec) -> tuple[str, float]:
        """The run's state and capped loss: from the committed table where it is recorded there, else its directory."""
        recorded = self.recorded.get(spec.run_dir)
        if recorded is not None:
            return recorded.state, recorded.loss
        state = run_state(spec.run_dir)
        return state, capped_loss(spec.run_dir) if state in DONE_STATES else math.nan


def _grid(losses: dict[float, dict[int, float]]) -> str:
    return ", ".join(format_lr(lr) for lr in sorted(losses))
