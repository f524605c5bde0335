"""Running a suite's ``search:`` (:mod:`andrea_lab.experiments.sweep.search_suite`) inside ``andrea sweep``.

Each searching (scale, variant) is a cell whose runs are not known in advance: coordinate descent
(:func:`andrea_lab.experiments.sweep.search.next_step`) names the next key's points once the previous step's
runs ended. So the cell's runs are planned step by step through the runner's ``extension`` hook (the hook
``extend_grid`` uses): whenever no run is left, :class:`SearchRuns` replays each cell's descent from the runs on
disk and returns the next step's runs; once a cell's descent ends, the best point's runs at the judged seeds.

Where the runs go, and why:

- tuning runs in ``<runs-dir>/<suite>@tuning/[<scale>/]<variant>/<point>-seed<seed>/``, beside the suite's
  directory and not in it, so that ``andrea compare <runs-dir>/<suite>`` never reads a tuning seed as a judged
  one (the search chose the point on them: judging on them would be judging the choice on its own data);
- judged runs in the suite's own layout, ``<suite>/[<scale>/]<variant>/lr<lr>-seed<seed>/``, which compare reads
  as the variant at one LR;
- ``<suite>/search.json``: per cell, the declared budget, the points spent, why the descent stopped, the best
  point, each key's values tried and the path (each step's label and its points' losses), for compare to print
  each variant's budget and say which tuned value sits at the edge of its values.

Each run's ``sweep-run.json`` carries its step (``search_step``: "search round 2, model.weight_decay", or "judged
at the search's best point"), and so does the line the sweep prints for it. Resuming needs no state file: the
descent is replayed from the finished runs' losses, so a rerun after a kill continues the same path (ties keep
the current point, keys in the suite's order). A point's loss is the mean over its tuning seeds of the loss
compare chooses by (the held-out selection part, never the test part the verdicts are judged on; a diverged run
at its loss at init: ``grid_extension.capped_loss``), which the record names (``score``). A
step whose run failed stops that cell's search for this sweep (said once); the next sweep retries it.

A cell still searching has its record too (``reason`` "in progress": its path so far, each finished point's
loss), written whenever the sweep plans its next runs, and by ``andrea sweep --dry-run`` where the suite's
directory exists. Committed, it carries the search to a later session whose runs directory is gone
(``--search-record``, :mod:`andrea_lab.experiments.sweep.search_ledger`). A cell's entry keeps every finished
point it knew (its earlier entry, --search-record's, the finished runs in its tuning directory) that its path
does not hold (``earlier_points``): a suite amended between sessions (extensions, a budget) walks another path,
and the old path's points may be met again later.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable, Optional, Sequence

from andrea_lab.experiments.sweep.grid_extension import capped_loss, cells, renumbered
from andrea_lab.experiments.sweep.plan import RunSpec, suite_runs_dir
from andrea_lab.experiments.sweep.search import Outcome, Point, Search, Step, next_step
from andrea_lab.experiments.sweep.search_ledger import EARLIER, SCORE, SearchLedger, recorded_points
from andrea_lab.experiments.sweep.suite import Suite, SuiteError, cli_value, run_version
from andrea_lab.files import HandedFileError, load_json, read_json, write_json_atomic
from andrea_lab.runs.directory import DONE_STATES, START_MARKER, run_state, settings_difference

RECORD = "search.json"
TUNING_SUFFIX = "@tuning"  # '@' is not allowed in a suite's name: no suite's directory can be another's tuning
JUDGED = "judged at the search's best point"
#: A cell's ``reason`` in search.json while its descent goes on (a sweep stopped, or a session's end).
IN_PROGRESS = "in progress"
Cell = tuple[Optional[str], str]


def tuning_root(runs_dir: str | Path, suite: Suite) -> Path:
    return Path(runs_dir) / f"{suite.name}{TUNING_SUFFIX}"


def root_of(run_dir: Path, directory: Path) -> Path:
    """The directory a planned run must lie in: the suite's ``directory``, or its tuning runs' beside it."""
    tuning = directory.resolve().with_name(directory.name + TUNING_SUFFIX)
    return tuning if tuning in Path(run_dir).parents else directory.resolve()


def point_version(point: Point, seed: int) -> str:
    """``lr0.002-weight_decay0.1-seed900``: each tuned key by its last component (unique: search_suite)."""
    return "-".join(f"{key.rsplit('.', 1)[-1]}{value:g}" for key, value in point) + f"-seed{seed}"


def _command(template: RunSpec, extra: dict, lr: float, seed: int, save_dir: Path, version: str) -> tuple[str, ...]:
    """``template``'s command (a planned run of the cell, with the speed path the sweep chose for it) at another
    LR, seed and directory, with ``extra`` overrides put after the variant's own (before ``--model.lr``)."""
    replace = {
        "--model.lr": repr(float(lr)),
        "--seed_everything": str(seed),
        "--data.seed": str(seed),
        "--trainer.logger.init_args.save_dir": str(save_dir),
        "--trainer.logger.init_args.version": version,
    }
    out: list[str] = []
    args = list(template.command)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--model.lr":
            for key, value in extra.items():  # 50.0 as 50: an int key (warmup) refuses "50.0", a float one reads 50
                whole = isinstance(value, float) and value.is_integer()
                out += [f"--{key}", cli_value(int(value) if whole else value)]
        if arg in replace and index + 1 < len(args):
            out += [arg, replace[arg]]
            index += 2
            continue
        out.append(arg)
        index += 1
    return tuple(out)


class SearchRuns:
    """The runner's ``extension`` for a suite's searching cells (and, for the others, the ``then`` hook, e.g.
    extend_grid's): called with every run planned so far once none is left to run."""

    def __init__(
        self,
        suite: Suite,
        runs_dir: str | Path,
        planned: Sequence[RunSpec],
        then: Optional[Callable[[list[RunSpec], Callable[[str], None]], list[RunSpec]]] = None,
        ledger: Optional[SearchLedger] = None,
    ):
        self.suite, self.then = suite, then
        #: An earlier session's record (--search-record); without one, an empty ledger that stands for nothing.
        self.ledger = ledger if ledger is not None else SearchLedger(None, {})
        self.directory = suite_runs_dir(runs_dir, suite)
        self.tuning = tuning_root(runs_dir, suite).resolve()
        #: One planned run per searching cell: its command is the template of the cell's runs.
        self.templates = {cell: specs[0] for cell, specs in cells(planned).items() if cell[1] in suite.searches}
        self.settled: set[Cell] = set()
        self.planning = False  # within initial(): a run made with other settings is refused, not skipped
        self._disk: dict[Cell, dict[Point, float]] = {}  # each cell's finished tuning points on disk (_on_disk)
        self._recorded()  # a record that is not one is refused before any run, not mid-sweep

    def searching(self, spec: RunSpec) -> bool:
        return spec.variant in self.suite.searches

    def initial(self, planned: Sequence[RunSpec], say: Callable[[str], None] = lambda _: None) -> list[RunSpec]:
        """The plan with each searching cell's grid runs replaced by its next step's runs (or its judged runs)."""
        kept = [spec for spec in planned if not self.searching(spec)]
        self.planning = True
        try:
            every = kept + self._advance_all([], say)
        finally:
            self.planning = False
        return renumbered(every, 1, len(every))

    def __call__(self, specs: Sequence[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
        added = self._advance_all(specs, say)
        if not added and self.then is not None:
            added = self.then([spec for spec in specs if not self.searching(spec)], say)
            return renumbered(added, len(specs) + 1, len(specs) + len(added))
        return renumbered(added, len(specs) + 1, len(specs) + len(added))

    @property
    def refusal(self) -> Optional[str]:
        """Why the search stopped before its end: an earlier session's record this machine does not rerun."""
        return self.ledger.refusal

    def _advance_all(self, specs: Sequence[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
        tried = {spec.run_dir for spec in specs}
        added: list[RunSpec] = []
        # The record's cells first: its witness is met before any other cell advances (or settles, and its judged
        # runs are planned and then held back for the witness); the order among them stays the suite's.
        for cell in sorted(self.templates, key=lambda cell: not self.ledger.holds(cell)):
            if self.refusal is not None:
                return []
            if cell not in self.settled:
                more = self._advance(cell, tried, say)
                if self.ledger.waiting:  # the record's witness runs alone, first
                    return more
                added += more
        return added

    def _advance(self, cell: Cell, tried: set[Path], say: Callable[[str], None]) -> list[RunSpec]:
        """The cell's next runs not yet ended, replaying its descent from the runs that did."""
        search: Search = self.suite.searches[cell[1]]
        losses: dict[Point, float] = {}
        path: list[dict] = []
        while isinstance(step := next_step(search, losses), Step):
            runs = {
                point: [self._tuning_run(cell, step, point, seed) for seed in search.tuning_seeds]
                for point in step.points
            }
            for point, point_runs in runs.items():
                if (recorded := self.ledger.loss(cell, point)) is not None:
                    losses[point] = recorded  # an earlier session's point (search_ledger): its runs went with it
                elif all(run_state(run.run_dir) in DONE_STATES for run in point_runs):
                    if (stale := _made_otherwise(point_runs)) is not None:
                        if self.planning:  # before any run: one line and exit 2, as for the grid's runs
                            raise SuiteError(
                                f"{_where(cell)}: {stale}; a sweep neither counts nor overwrites it: "
                                "give these settings their own --runs-dir, or move the old runs away"
                            )
                        self.settled.add(cell)
                        say(
                            f"search: {_where(cell)}: {stale}; its search stops (give these settings their own "
                            "--runs-dir)"
                        )
                        return []
                    losses[point] = _mean_loss(point_runs)
                    self.ledger.check(cell, point, losses[point])
                    if self.ledger.refusal is not None:
                        return []
            path.append({"step": step.label(), "points": [_described(p, losses.get(p)) for p in step.points]})
            pending = [run for point, point_runs in runs.items() if point not in losses for run in point_runs]
            if self.ledger.waiting:  # the record's witness alone, before anything else
                pending = [run for point, point_runs in runs.items() if self.ledger.witness == (cell, point)
                           for run in point_runs] or pending  # fmt: skip
            if pending:
                if not self.planning or self.directory.is_dir():  # a --dry-run refreshes a record, never starts one
                    self._record(cell, _in_progress(step, losses), path)  # the search so far, for a later session
                return self._pending(cell, pending, tried, say)
        self.settled.add(cell)
        self._record(cell, step, path)
        judged = [self._judged_run(cell, step.best, seed) for seed in search.judged_seeds]
        return [run for run in judged if run.run_dir not in tried]

    def _pending(self, cell: Cell, pending: list[RunSpec], tried: set[Path], say) -> list[RunSpec]:
        ended_badly = [run for run in pending if run.run_dir in tried and run_state(run.run_dir) not in DONE_STATES]
        if ended_badly:
            self.settled.add(cell)
            say(
                f"search: {_where(cell)}: {ended_badly[0].label} did not finish, so its search stops here for this "
                "sweep; the next `andrea sweep` retries it"
            )
            return []
        return [run for run in pending if run.run_dir not in tried]

    def _tuning_run(self, cell: Cell, step: Step, point: Point, seed: int) -> RunSpec:
        values = dict(point)
        lr = values.pop("model.lr", self.templates[cell].lr)
        save_dir = self.tuning if cell[0] is None else self.tuning / cell[0]
        return self._spec(cell, values, lr, seed, save_dir, point_version(point, seed), step.label())

    def _judged_run(self, cell: Cell, best: Point, seed: int) -> RunSpec:
        values = dict(best)
        lr = values.pop("model.lr", self.templates[cell].lr)
        save_dir = self.directory.resolve() if cell[0] is None else self.directory.resolve() / cell[0]
        return self._spec(cell, values, lr, seed, save_dir, run_version(lr, seed), JUDGED)

    def _spec(self, cell: Cell, values: dict, lr: float, seed: int, save_dir: Path, version: str, step: str):
        template = self.templates[cell]
        return dataclasses.replace(
            template,
            lr=float(lr),
            seed=seed,
            run_dir=save_dir / template.variant / version,
            command=_command(template, values, lr, seed, save_dir, version),
            overrides={**template.overrides, **values},
            search_step=step,
        )

    def _recorded(self) -> list[dict]:
        """The entries of ``<suite>/search.json`` (none without it, or where its losses are another score than
        :data:`SCORE`: each cell rewrites its entry from its runs as it advances); SuiteError, one line, if it is not
        a record (the runs directory may be a handed one)."""
        record = self.directory / RECORD
        if not record.is_file():
            return []
        try:
            document = load_json(record, "search record")
            entries = document["searches"]
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise TypeError("searches is not a list of entries")
        except (HandedFileError, KeyError, TypeError) as problem:
            raise SuiteError(f"{record}: not a search record ({problem}); move it away to run the search") from None
        return entries if document.get("score") == SCORE else []

    def _record(self, cell: Cell, outcome: Outcome, path: list[dict]) -> None:
        """The cell's outcome into ``<suite>/search.json`` (other cells' entries kept)."""
        search = self.suite.searches[cell[1]]
        entry = {
            "scale": cell[0],
            "variant": cell[1],
            "budget": search.budget,
            "spent": outcome.spent,
            "reason": outcome.reason,
            "best": dict(outcome.best),
            "loss": outcome.loss if math.isfinite(outcome.loss) else None,
            "values": {key: list(outcome.extended.get(key, values)) for key, values in search.keys.items()},
            "tuning_seeds": list(search.tuning_seeds),
            "path": path,
        }
        if self.ledger.path is not None:  # where the losses of points not run here came from
            entry["from_record"] = {"record": str(self.ledger.path), "points": len(self.ledger.read.get(cell, ()))}
        entries = self._recorded()
        others = [e for e in entries if (e.get("scale"), e.get("variant")) != cell]
        previous = [e for e in entries if (e.get("scale"), e.get("variant")) == cell]
        if outcome.reason == IN_PROGRESS and any(_further(e, outcome.spent) for e in previous):
            return  # a replay that knows less than the record (its runs gone, no --search-record) never rewinds it
        if earlier := self._earlier(cell, path, previous):
            entry[EARLIER] = earlier
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.directory / RECORD, {"schema": 1, "score": SCORE, "searches": [*others, entry]})

    def _earlier(self, cell: Cell, path: list[dict], previous: list[dict]) -> list[dict]:
        """The cell's finished points that its path (so far) does not hold, from the record this file held before
        and from --search-record's: a rule amended since (extensions, a budget) walks another path, and a
        record that dropped the old path's points would make a later session rerun them."""
        search = self.suite.searches[cell[1]]
        known = {**self.ledger.losses.get(cell, {}), **self._on_disk(cell)}
        for entry in previous:
            try:
                known.update(recorded_points(entry, search))
            except (KeyError, TypeError, ValueError):  # not this search's entry: it holds nothing to keep
                continue
        on_path = {search.point(each["point"]) for step in path for each in step["points"] if each["loss"] is not None}
        return [_described(point, loss) for point, loss in sorted(known.items()) if point not in on_path]

    def _on_disk(self, cell: Cell) -> dict[Point, float]:
        """The cell's finished tuning points in its tuning directory, whichever path ran them (read once a sweep:
        the runs it makes itself are on its path): a runs directory kept across an amendment, or a record of
        another score set aside, still holds the old path's runs, and the record should name them."""
        if cell in self._disk:
            return self._disk[cell]
        search, found = self.suite.searches[cell[1]], {}
        root = (self.tuning if cell[0] is None else self.tuning / cell[0]) / cell[1]
        for marker in sorted(root.glob(f"*-seed{search.tuning_seeds[0]}/{START_MARKER}")) if root.is_dir() else []:
            recorded = read_json(marker) or {}
            try:
                values = {**recorded["overrides"], "model.lr": recorded["lr"]}
                point = search.point({key: float(values[key]) for key in search.keys})
            except (KeyError, TypeError, ValueError):  # not a run of this search
                continue
            runs = [self._tuning_run(cell, ON_DISK, point, seed) for seed in search.tuning_seeds]
            if runs[0].run_dir != marker.parent.resolve() or not all(run_state(r.run_dir) in DONE_STATES for r in runs):
                continue
            if _made_otherwise(runs) is None:
                found[point] = _mean_loss(runs)
        self._disk[cell] = {point: loss for point, loss in found.items() if math.isfinite(loss)}
        return self._disk[cell]


#: The step a finished run found on disk is labelled with (never run: only its loss is read).
ON_DISK = Step("runs found on disk", 0, ())


def _further(entry: dict, spent: int) -> bool:
    """Whether a recorded entry spent more points than a replay still searching at ``spent``. A dry run (or a
    sweep's planning) in a runs directory whose tuning runs are gone replays only what is on disk, and would
    otherwise overwrite a finished record with its first step; the entry stays until the replay passes it (a real
    sweep reruns those points, to the same losses). A suite amended to a larger budget passes it once it spends
    more than the old entry did."""
    spent_before = entry.get("spent")
    return isinstance(spent_before, int) and spent_before > spent


def _in_progress(step: Step, losses: dict[Point, float]) -> Outcome:
    """A searching cell's record so far: the best point yet (the step's key still being swept)."""
    finite = {point: loss for point, loss in losses.items() if math.isfinite(loss)}
    best = min(finite, key=finite.__getitem__) if finite else step.points[0]
    return Outcome(best, finite.get(best, math.nan), len(losses), IN_PROGRESS)


def _made_otherwise(runs: Sequence[RunSpec]) -> Optional[str]:
    """What differs where a finished run of the point was made with other settings (a suite edited since): its
    loss is not this point's, so the descent may not count it."""
    for run in runs:
        if (difference := settings_difference(run.run_dir, list(run.command))) is not None:
            return f"{run.run_dir} holds a run made with other settings ({difference})"
    return None


def _mean_loss(runs: Sequence[RunSpec]) -> float:
    """The point's loss: the mean over its tuning seeds; a run without a score never counts as the best."""
    values = [capped_loss(run.run_dir) for run in runs]
    return math.inf if any(math.isnan(v) for v in values) else sum(values) / len(values)


def _described(point: Point, loss: Optional[float]) -> dict:
    return {"point": dict(point), "loss": loss if loss is not None and math.isfinite(loss) else None}


def _where(cell: Cell) -> str:
    return " ".join(part for part in cell if part is not None)


def plan_lines(suite: Suite, specs: Sequence[RunSpec]) -> list[str]:
    """What the search may run beyond the runs listed: its budget per cell, and the most runs in all."""
    searching = [cell for cell in cells(specs) if cell[1] in suite.searches]
    if not searching:
        return []
    most = sum(
        suite.searches[v].budget * len(suite.searches[v].tuning_seeds) + len(suite.searches[v].judged_seeds)
        for _, v in searching
    )
    budgets = sorted({suite.searches[v].budget for _, v in searching})
    keys = "; ".join(f"{name} {', '.join(s.keys)}" for name, s in suite.searches.items())
    return [
        f"search: coordinate descent in {len(searching)} (scale, variant) cells, a budget of "
        f"{'/'.join(map(str, budgets))} points each at every tuning seed ({keys}){_beyond_edges(suite)}: at most "
        f"{most} runs in all, tuning and judged (the runs listed are each cell's next step)"
    ]


def _beyond_edges(suite: Suite) -> str:
    """How far the searches may extend a key whose best value is at an edge (nothing where none may)."""
    extending = [search for search in suite.searches.values() if search.max_extensions]
    if not extending:
        return ""
    most = "/".join(str(n) for n in sorted({search.max_extensions for search in extending}))
    factors = "/".join(f"{f:g}" for f in sorted({search.factor for search in extending}))
    bounds = sorted({f"{key} < {bound:g}" for search in extending for key, bound in search.upper_bounds.items()})
    bounded = f"; in the distance to the bound for {', '.join(bounds)}" if bounds else ""
    return f"; a best value at an edge gains up to {most} values beyond it per key (factor {factors}{bounded})"
