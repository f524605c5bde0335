"""Each run's outcome as columns of the runs table: stuck, regressed, blew_up or trained (andrea_lab.runs.outcome).

A run directory's summary.json carries its ``outcome`` since the record had one; a runs.csv or a record from
before has only the divergence columns, and :func:`with_outcomes` reads the outcome from those with the same
rule a fit now applies, so that the committed suites are re-read under the three names without a rerun. Such
a row has no rise size or length (the curve is not in the table): only the rise's onset is known.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

from andrea_lab.runs.outcome import BLEW_UP, FAILURES, REGRESSED, STUCK, TRAINED, UNNAMED, classify

OUTCOME, OUTCOME_STEP, OUTCOME_SIZE = "outcome", "outcome_step", "outcome_size"
RISE_STEP, RISE_SIZE, RISE_LENGTH = "rise_step", "rise_size", "rise_length"
#: The runs.csv columns of a run's outcome (written where some run has a value).
OUTCOME_COLUMNS = (OUTCOME, OUTCOME_STEP, OUTCOME_SIZE, RISE_STEP, RISE_SIZE, RISE_LENGTH)
#: Those of them that are step counts (whole numbers in runs.csv).
INTEGER_COLUMNS = (OUTCOME_STEP, RISE_STEP, RISE_LENGTH)
#: Per failure, the 0/1 column :func:`with_outcomes` adds and the claim kind that counts it.
FAILURE_FLAGS = {STUCK: "stuck", REGRESSED: "regressed", BLEW_UP: "blew_up"}
DONE = ("finished", "diverged")


def record_outcome_columns(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``outcome`` as runs.csv columns (all None for a record from before it)."""
    rise = outcome.get("rise") or {}
    return {
        OUTCOME: outcome.get("kind"),
        OUTCOME_STEP: outcome.get("step"),
        OUTCOME_SIZE: outcome.get("size"),
        RISE_STEP: rise.get("step"),
        RISE_SIZE: rise.get("size"),
        RISE_LENGTH: rise.get("length"),
    }


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _row_outcome(row: pd.Series) -> dict[str, Any]:
    columns = ("divergence_kind", "divergence_cause", "divergence_step", "initial_val_loss", "best_val_loss")
    values = [None if _missing(row.get(column)) else row.get(column) for column in (*columns, "final_val_loss")]
    found = classify(*values)
    return record_outcome_columns(found.as_dict())


def with_outcomes(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the outcome columns filled for every finished or diverged run that lacks them, and a 0/1
    column per failure (``stuck``, ``regressed``, ``blew_up``). A run recorded as diverged whose rise came back
    by its end (a row from before the outcome) is a spike, not a divergence: its status becomes ``finished``
    and its divergence columns empty, the rise kept in ``rise_step``, as a fit now records it. Idempotent."""
    runs = runs.copy()
    for column in OUTCOME_COLUMNS:
        if column not in runs:
            runs[column] = None
    runs[OUTCOME] = runs[OUTCOME].astype("object")
    todo = runs["status"].isin(DONE) & runs[OUTCOME].map(_missing)
    kinds = runs["divergence_kind"] if "divergence_kind" in runs else pd.Series(None, index=runs.index)
    unnamed = kinds.map(lambda kind: _missing(kind) or kind == "")
    plain = todo & unnamed & (runs["status"] != "diverged")  # no divergence: trained (a table has thousands)
    runs.loc[plain, OUTCOME] = TRAINED
    runs.loc[todo & unnamed & (runs["status"] == "diverged"), OUTCOME] = UNNAMED  # diverged, kind not kept
    for index in runs.index[todo & ~unnamed]:
        for column, value in _row_outcome(runs.loc[index]).items():
            runs.at[index, column] = value
    recovered = (runs["status"] == "diverged") & (runs[OUTCOME] == TRAINED)
    if recovered.any():
        runs.loc[recovered, "status"] = "finished"
        for column in ("divergence_kind", "divergence_step", "divergence_cause"):
            if column in runs:
                runs.loc[recovered, column] = None
    for kind, column in FAILURE_FLAGS.items():
        runs[column] = runs[OUTCOME] == kind
    runs["failed"] = runs[OUTCOME].isin(FAILURES)
    return runs
