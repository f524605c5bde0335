"""``andrea compare runs/<suite> --from-table RUNS_CSV``: a committed suite's table and the runs that extended it,
judged as one suite.

``andrea sweep --from-table`` (:mod:`andrea_lab.experiments.sweep.from_table`) runs only what a committed table
lacks, plus one *witness* a scale: a run the table holds, rerun. The merge rests on those reruns being
bit-identical, so it is checked here again from the runs themselves, not from anything the sweep wrote: every run
that is also in the table must equal its row to the bit (loss at init, final in-training loss, held-out loss),
and every scale with new runs must have such a witness: one the table holds runs of, its own; one it holds none of
(a ladder's next rung, made across sessions), one at another scale, which shows this machine reruns the table.
Then the table's rows stand for the runs it holds (they keep their own record: machine, wall time, start) and the
new runs are added, with what the table never measured blanked (:func:`header`). A run the table holds as
stopped (interrupted at a session's end) and that ended here is not a witness but the run itself: it replaces the
row. The report is the statistics only, as from a runs.csv: the table's runs have no curves here.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from andrea_lab.experiments.compare.runs_table import COMPILED, CURVE_COLUMNS, MAX_RUNS_CSV_BYTES, read_runs_csv
from andrea_lab.files import HandedFileError, load_json, read_regular_bytes
from andrea_lab.runs.committed_table import RECORD, WITNESSED, Key, is_missing, key_of, label
from andrea_lab.runs.directory import DONE_STATES


def _keys(frame: pd.DataFrame) -> list[Key]:
    scales = frame["scale"] if "scale" in frame else [None] * len(frame)
    return [key_of(*cells) for cells in zip(scales, frame["variant"], frame["lr"], frame["seed"])]


def _same(a, b) -> bool:
    """Equal to the bit, or both missing."""
    if is_missing(a) or is_missing(b):
        return is_missing(a) and is_missing(b)
    return float(a) == float(b)


def merged(runs: pd.DataFrame, table_path: str | Path) -> pd.DataFrame:
    """The table's runs and the new ``runs`` as one table; ValueError (one line) when they are not one suite, a
    rerun differs from its row, or a scale with new runs has no witness."""
    table = read_runs_csv(table_path)
    suites = sorted(set(table["suite"].dropna()) | set(runs["suite"].dropna()))
    if len(suites) != 1:
        raise ValueError(f"--from-table {table_path}: its runs and these are of several suites ({', '.join(suites)})")
    rows = dict(zip(_keys(table), table.to_dict("records")))
    if len(rows) < len(table):
        raise ValueError(f"--from-table {table_path}: holds one run twice (the same scale, variant, LR and seed)")
    witnessed, new, superseded = set(), [], set()
    for key, run in zip(_keys(runs), runs.to_dict("records")):
        row = rows.get(key)
        if row is not None and row.get("status") not in DONE_STATES and run["status"] in DONE_STATES:
            superseded.add(key)  # the table's run was stopped (a session's end); this one ended: it stands
            row = None
        if row is None:
            new.append(run)
            continue
        if run["status"] not in DONE_STATES:
            continue  # an attempt that did not end (superseded, failed): the table's row stands for the run
        for column in WITNESSED:
            if not _same(row.get(column), run.get(column)):
                raise ValueError(
                    f"--from-table {table_path}: the rerun {label(key)} has {column} {run.get(column)!r} where the "
                    f"table has {row.get(column)!r}: these runs do not reproduce the table's to the bit and cannot "
                    "be judged with them; rerun the whole suite"
                )
        witnessed.add(key[0])
    held = {key[0] for key in rows}  # a scale the table holds no run of (a ladder's next rung) is compared within
    unwitnessed = sorted({str(run.get("scale")) for run in new if _scale(run) in held and _scale(run) not in witnessed})
    if new and not witnessed:
        unwitnessed = unwitnessed or ["any"]  # then one witness anywhere shows this machine reruns the table
    if unwitnessed:
        raise ValueError(
            f"--from-table {table_path}: no run here reruns one of the table's at scale(s) {', '.join(unwitnessed)}, "
            "so nothing shows the new runs are comparable with it (andrea sweep --from-table reruns one a scale)"
        )
    added = pd.DataFrame(new, columns=runs.columns).drop(columns=list(CURVE_COLUMNS), errors="ignore")
    for column in set(added.columns) - header(table_path) - {COMPILED}:  # measured by the new runs only: scored as
        added[column] = None  # the table was (how a run was made, which scores nothing, is kept)
    kept = table[[key not in superseded for key in _keys(table)]]
    return pd.concat([kept, added], ignore_index=True) if new else table


def header(path: str | Path) -> set[str]:
    """The columns the table's file has. A column it lacks (the held-out test documents' loss, in a table made
    before the split) is blanked in the new runs, so that the merged suite is scored as the table was and no
    claim mixes two scores."""
    data = read_regular_bytes(path, "runs table", MAX_RUNS_CSV_BYTES)
    return set(next(csv.reader([data.split(b"\n", 1)[0].decode("utf-8", "replace")]), []))


def _scale(run: dict):
    return None if is_missing(run.get("scale")) else run["scale"]


def extended_tables(source: Path) -> list[tuple[Path, str]]:
    """The suite directories at or under ``source`` whose runs extend a committed table (andrea sweep
    --from-table's record), with that table's path as recorded: compared alone, such runs are part of a grid."""
    found = []
    for record in [source / RECORD, *sorted(source.glob(f"*/{RECORD}"))]:
        if record.is_file():
            try:
                found.append((record.parent, str(load_json(record, "from-table record")["table"])))
            except (HandedFileError, KeyError, TypeError):
                found.append((record.parent, "(its record is unreadable)"))
    return found
