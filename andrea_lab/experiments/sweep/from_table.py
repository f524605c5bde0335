"""``andrea sweep SUITE --from-table RUNS_CSV``: extend a committed suite's LR grids without rerunning the suite.

Why: ``runs/`` is not in git, so a committed suite whose best LR sits at the edge of its grid (which compare
does not judge: :mod:`andrea_lab.experiments.compare.optimum_edges`) needed a full rerun, hours, to add the one
LR beyond that edge. Its committed ``runs.csv`` already holds the outcome of every planned run, and reruns of a
run on one kind of machine with one torch are bit-identical. So the sweep takes the planned runs' outcomes from
the table and runs only what the table lacks (the LRs a suite's amended ``lrs:`` adds to every variant) and
the LRs ``extend_grid`` adds beyond an edge optimum (its rule: :mod:`andrea_lab.experiments.sweep.grid_extension`).

That rests on the reruns being identical here, which is checked, not assumed: at each scale the first planned
run the table holds is rerun, a *witness*, and its loss at init, final in-training loss and held-out loss must
equal the table's to the bit. The witnesses run first; one that differs (another CPU kind, another torch, a suite
or a default changed since the table was made) stops the sweep before anything else runs: runs from here would not be
comparable with the table's, and the suite must be rerun whole. ``andrea compare --from-table``
(:mod:`andrea_lab.experiments.compare.table_merge`) merges the same table with the new runs and checks the
witnesses again from the runs themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from andrea_lab.experiments.sweep.grid_extension import GridExtension, Recorded, capped, choosing_score, renumbered
from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.experiments.sweep.speed_path import Tabled
from andrea_lab.experiments.sweep.suite import Suite, SuiteError
from andrea_lab.files import HandedFileError, write_json_atomic
from andrea_lab.runs.committed_table import COMPILED, RECORD, WITNESSED, Key, compiled_of, is_missing, key_of, label
from andrea_lab.runs.directory import DONE_STATES, NONFINITE, read_record, run_state
from andrea_lab.runs.machine import cpu_kind


@dataclass(frozen=True)
class TableRun:
    """One ended run of the committed table: its state, the numbers a witness must reproduce, its capped loss."""

    state: str
    numbers: tuple[Optional[float], ...]  # WITNESSED, in order
    loss: float
    precision: Optional[str] = None  # the trainer precision the table recorded (older tables did not)
    compiled: Optional[bool] = None  # whether it compiled, where the table says (its ``compiled`` column)


def _float(value) -> Optional[float]:
    return None if is_missing(value) else float(value)


@dataclass(frozen=True)
class Table:
    """A committed table's ended runs, and what they ran on where it recorded it (older tables did not)."""

    runs: dict[Key, TableRun]
    kinds: frozenset[str]  # the CPU kinds (andrea_lab.runs.machine.cpu_kind)
    threads: frozenset[int]  # torch's threads a fit


def read_table(path: str | Path, suite: Suite) -> Table:
    """The ended runs of ``suite`` in the committed ``runs.csv`` at ``path``; SuiteError (one line) when the file
    is not such a table, holds another suite's runs or holds one run twice."""
    from andrea_lab.experiments.compare.runs_table import read_runs_csv  # pandas: only a --from-table sweep reads one

    try:
        table = read_runs_csv(path)
    except (HandedFileError, ValueError, KeyError) as problem:
        raise SuiteError(f"--from-table {path}: not a runs.csv that andrea compare wrote ({problem})") from None
    suites = sorted(set(table["suite"].dropna()))
    if suites != [suite.name]:
        found = ", ".join(suites) or "no suite"
        raise SuiteError(f"--from-table {path}: holds the runs of {found}, not of {suite.name} ({suite.path})")
    runs: dict[Key, TableRun] = {}
    for row in table.to_dict("records"):
        if row["status"] not in DONE_STATES:
            continue  # a run the table has no outcome for is run again
        key = key_of(row.get("scale"), row["variant"], row["lr"], row["seed"])
        if key in runs:
            raise SuiteError(f"--from-table {path}: holds the run {label(key)} twice")
        numbers = tuple(_float(row.get(column)) for column in WITNESSED)
        loss = capped(numbers[0], _choosing(row, numbers), row.get("divergence_kind") == NONFINITE)
        precision = None if is_missing(row.get("precision")) else str(row["precision"])
        runs[key] = TableRun(row["status"], numbers, loss, precision, compiled_of(row.get(COMPILED)))
    kinds = frozenset(str(kind) for kind in table.get("machine", []) if not is_missing(kind))
    return Table(runs, kinds, frozenset(int(n) for n in table.get("threads", []) if not is_missing(n)))


def _choosing(row: Mapping, numbers: tuple[Optional[float], ...]) -> Optional[float]:
    """The row's score a choice is made on, in the order a run's record is read
    (:func:`~andrea_lab.experiments.sweep.grid_extension.choosing_score`; ``numbers``: WITNESSED's)."""
    from andrea_lab.experiments.compare.heldout_columns import HELDOUT_BY_DOCUMENT, SELECTION_LOSS  # pandas, as above

    by_part, by_document = _float(row.get(SELECTION_LOSS)), _float(row.get(HELDOUT_BY_DOCUMENT))
    return choosing_score(by_part, by_document, whole=numbers[2], last=numbers[1])


def row_of(rows: Mapping[Key, TableRun], spec: RunSpec) -> Optional[TableRun]:
    """The table's row of the planned run ``spec`` (None: the table holds no such run)."""
    return rows.get(key_of(spec.scale, spec.variant, spec.lr, spec.seed))


def precision_of(table: Table) -> Callable[[RunSpec], Optional[Tabled]]:
    """The precision and compile the table recorded for a planned run (None where it holds no such run; precision
    "" where it holds one but recorded none, as tables made before the sweep chose one: made as the config said;
    compiled None where the table does not say): the speed rule keeps a rung the table holds on the table's
    arithmetic, or its witness could not reproduce it."""

    def precision(spec: RunSpec) -> Optional[Tabled]:
        row = row_of(table.runs, spec)
        return None if row is None else Tabled(row.precision or "", row.compiled)

    return precision


@dataclass
class TablePlan:
    """A sweep's planned runs split against the table: the witnesses it reruns first, the runs the table lacks
    (run once the witnesses reproduced it) and those it reads from the table."""

    table: Path
    kinds: frozenset[str] = frozenset()
    threads: frozenset[int] = frozenset()
    rows: dict[Key, TableRun] = field(default_factory=dict)  # every ended run the table holds, planned or not
    witnesses: list[tuple[RunSpec, TableRun]] = field(default_factory=list)
    pending: list[RunSpec] = field(default_factory=list)
    recorded: dict[Path, Recorded] = field(default_factory=dict)
    recorded_specs: list[RunSpec] = field(default_factory=list)

    def to_run(self, witnesses: Sequence[RunSpec]) -> list[RunSpec]:
        """Every run this sweep makes before extend_grid: the witnesses, then the runs the table lacks."""
        return [*witnesses, *self.pending]

    def every(self, witnesses: Sequence[RunSpec]) -> list[RunSpec]:
        """The suite's whole plan: the runs to make and those read from the table."""
        return [*self.to_run(witnesses), *self.recorded_specs]

    def lines(self) -> list[str]:
        witnesses = "; ".join(spec.label for spec, _ in self.witnesses)
        return [
            f"from the table {self.table}: {len(self.recorded_specs)} planned runs read from it, not rerun; "
            f"first rerun, to check they reproduce it to the bit (one a scale): {witnesses}; then the "
            f"{len(self.pending)} planned runs it lacks"
        ]


def split(specs: Sequence[RunSpec], table: Table, path: Path) -> tuple[list[RunSpec], TablePlan]:
    """The witnesses to run first and the plan of the rest; SuiteError when the table holds no planned run."""
    plan, witnessed = TablePlan(Path(path), table.kinds, table.threads, table.runs), set()
    for spec in specs:
        row = row_of(table.runs, spec)
        if row is None:
            plan.pending.append(spec)
        elif spec.scale not in witnessed:
            witnessed.add(spec.scale)
            plan.witnesses.append((spec, row))
        else:
            plan.recorded[spec.run_dir] = Recorded(row.state, row.loss)
            plan.recorded_specs.append(spec)
    if not plan.witnesses:
        raise SuiteError(f"--from-table {path}: holds none of the runs this sweep plans, so it cannot stand for any")
    witnesses = renumbered([spec for spec, _ in plan.witnesses], 1, len(specs))
    plan.witnesses = list(zip(witnesses, (row for _, row in plan.witnesses)))
    plan.pending = renumbered(plan.pending, len(witnesses) + 1, len(specs))
    return witnesses, plan


def machine_problem(plan: TablePlan, threads_a_fit: Optional[int]) -> Optional[str]:
    """Why this machine cannot rerun the table's runs to the bit, known before any run (None: not known to
    differ): another CPU kind, or another thread count a fit (the matmuls split their sums by thread), where
    the table recorded them (``threads_a_fit``: what this sweep gives a fit, None where it leaves it to torch)."""
    here = cpu_kind()
    if plan.kinds and plan.kinds != {here}:
        return (
            f"--from-table {plan.table}: its runs ran on {', '.join(sorted(plan.kinds))} and this machine is {here}; "
            "reruns are bit-identical only on one kind of CPU: extend it on such a machine, or rerun the whole suite"
        )
    if plan.threads and threads_a_fit is not None and plan.threads != {threads_a_fit}:
        recorded = ", ".join(map(str, sorted(plan.threads)))
        return (
            f"--from-table {plan.table}: its runs ran at {recorded} thread(s) a fit and this sweep gives a fit "
            f"{threads_a_fit}; reruns are bit-identical only at one thread count: set --jobs (or OMP_NUM_THREADS) "
            "so that a fit gets as many"
        )
    return None


def write_record(directory: Path, plan: TablePlan) -> None:
    """Say in the suite's runs directory which table its runs extend (:data:`RECORD`)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / RECORD, {"schema": 1, "table": str(plan.table)})


def witness_problem(spec: RunSpec, row: TableRun) -> Optional[str]:
    """Why the rerun ``spec`` does not reproduce its table row to the bit (None: it does)."""
    state, record = run_state(spec.run_dir), read_record(spec.run_dir)
    if state not in DONE_STATES or record is None:
        return f"the witness {spec.label} did not end ({state}), so nothing shows that the table's runs rerun here"
    heldout = record.heldout.loss if record.heldout is not None else None
    rerun = tuple(_float(value) for value in (record.initial_val_loss, record.final_val_loss, heldout))
    for name, table_value, value in zip(WITNESSED, row.numbers, rerun):
        if table_value != value:
            return (
                f"the witness {spec.label} reran to {name} {value!r} where the table has {table_value!r}: this "
                "machine, torch, thread count a fit (--jobs), speed path or suite does not rerun the table's runs to "
                "the bit, so runs added here would not be comparable with them; rerun the whole suite (without "
                f"--from-table){_compile_hint(row)}"
            )
    return None


def _compile_hint(row: TableRun) -> str:
    """Where the table does not say whether a bf16 run compiled (tables before its ``compiled`` column), the speed
    rule guessed for the witness; the user knows which: say how to set it."""
    if row.compiled is not None or not (row.precision or "").startswith("bf16"):
        return ""
    return (
        "; the table does not record whether its runs compiled, and the sweep's rule guessed: if they were, "
        "try --speed bf16-compiled, else --speed bf16"
    )


class TableExtension:
    """The runner's ``extension`` under ``--from-table``. Its first call, once the witnesses ended, checks them: if
    one differs, nothing more runs and :attr:`refusal` says why; else the runs the table lacks. Later calls are
    the suite's :class:`GridExtension` (if it has ``extend_grid``), which counts the table's runs as planned runs
    and reads their outcomes from it."""

    def __init__(self, suite: Suite, runs_dir: str | Path, plan: TablePlan):
        self.plan, self.refusal, self.checked = plan, None, False
        self.grid = GridExtension(suite, runs_dir, recorded=plan.recorded) if suite.extend_grid else None

    def __call__(self, specs: Sequence[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
        if not self.checked:
            self.checked = True
            problems = filter(None, (witness_problem(spec, row) for spec, row in self.plan.witnesses))
            self.refusal = next(problems, None)
            if self.refusal is None:
                say(f"from the table: {len(self.plan.witnesses)} witness run(s) reproduce it to the bit")
            if self.refusal is None and self.plan.pending:
                return self.plan.pending
        if self.refusal is not None or self.grid is None:
            return []
        while added := self.grid([*self.plan.recorded_specs, *specs], say):
            fresh = [spec for spec in added if not self._read_from_table(spec)]
            if fresh:  # else every added run is the table's (an earlier session extended the cell): check again
                return renumbered(fresh, len(specs) + 1, len(specs) + len(fresh))
        return []

    def _read_from_table(self, spec: RunSpec) -> bool:
        """Whether the table holds the added run ``spec`` (an LR an earlier sweep added, whose record went with
        its runs directory): then its outcome is read from the table, as a planned run's is, not rerun."""
        row = row_of(self.plan.rows, spec)
        if row is None:
            return False
        self.plan.recorded[spec.run_dir] = self.grid.recorded[spec.run_dir] = Recorded(row.state, row.loss)
        self.plan.recorded_specs.append(spec)
        return True


def check_suite(suite: Suite) -> None:
    """Refuse a suite ``--from-table`` cannot extend, in one line."""
    if suite.searches:
        raise SuiteError(f"--from-table: {suite.path} tunes by search:, whose steps the table does not hold")
