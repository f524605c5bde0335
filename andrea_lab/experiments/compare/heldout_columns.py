"""The columns of runs.csv that come from a run's held-out record (summary.json ``heldout`` and
``heldout_curve``): the scores, their curves at fixed steps, and the strata.

Kept apart from :mod:`andrea_lab.experiments.compare.runs_table` because the held-out record grows with
what a comparison needs (bits per byte, the document-weighted score, strata) while the rest of the run's
row does not.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import pandas as pd

from andrea_lab.data.judging_split import PARTS
from andrea_lab.data.strata import STRATA
from andrea_lab.runs.directory import HeldOut

#: The held-out loss in bits per byte of text (summary.json ``heldout.bits_per_byte``): byte-level and BPE runs
#: on one scale. None for runs recorded before it was kept, or without a byte-level tokenizer.
BITS_PER_BYTE = "heldout_bits_per_byte"
#: The document-weighted held-out score (summary.json ``heldout.document_loss``), its error and the largest
#: share one document carries in it; None in older runs (compare.scored_loss_column says when it is scored).
HELDOUT_BY_DOCUMENT, HELDOUT_BY_DOCUMENT_SE = "heldout_document_loss", "heldout_document_se"
LARGEST_DOCUMENT_SHARE = "heldout_largest_document_share"
#: ``heldout_<stratum>_loss``: the document-weighted score within each stratum (andrea_lab.data.strata).
STRATUM_COLUMNS = tuple(f"heldout_{stratum}_loss" for stratum in STRATA)
#: The document-weighted score within each part of the held-out documents' selection/test split
#: (andrea_lab.data.judging_split; summary.json ``heldout.parts``): choices read the first, verdicts the second.
SELECTION_LOSS, TEST_LOSS = (f"heldout_{part}_loss" for part in PARTS)
#: The optional columns above, in runs.csv's order.
OPTIONAL = (
    BITS_PER_BYTE,
    HELDOUT_BY_DOCUMENT,
    HELDOUT_BY_DOCUMENT_SE,
    LARGEST_DOCUMENT_SHARE,
    *STRATUM_COLUMNS,
    SELECTION_LOSS,
    TEST_LOSS,
)

#: ``heldout_at_<step>``: the held-out loss at a step fixed in advance (summary.json ``heldout_curve``), one
#: column per step that some run has; written to runs.csv so that effects in steps recompute from it.
HELDOUT_AT = "heldout_at_"
#: ``heldout_document_at_<step>``: the document-weighted score there.
HELDOUT_DOCUMENT_AT = "heldout_document_at_"
#: Each final score's curve columns (steps.curve_of reads the curve of the score a comparison scores).
#: The test part has no curve of its own: its steps read the document-weighted curve over all held-out documents.
CURVE_PREFIXES = {"heldout_loss": HELDOUT_AT, HELDOUT_BY_DOCUMENT: HELDOUT_DOCUMENT_AT, TEST_LOSS: HELDOUT_DOCUMENT_AT}


def heldout_columns(heldout: Optional[HeldOut]) -> dict[str, Any]:
    """The runs.csv columns of one run's held-out record (all None without one)."""
    by_stratum = _label_losses(None if heldout is None else heldout.strata, STRATA, STRATUM_COLUMNS)
    by_part = _label_losses(None if heldout is None else heldout.parts, PARTS, (SELECTION_LOSS, TEST_LOSS))
    if heldout is None:
        return {"heldout_loss": None, "heldout_se": None, "heldout_tokens": None, "heldout_documents": None}
    return {
        "heldout_loss": heldout.loss,
        "heldout_se": heldout.se,
        "heldout_tokens": heldout.tokens,
        "heldout_documents": heldout.documents,
        BITS_PER_BYTE: heldout.bits_per_byte,
        HELDOUT_BY_DOCUMENT: heldout.document_loss,
        HELDOUT_BY_DOCUMENT_SE: heldout.document_se,
        LARGEST_DOCUMENT_SHARE: heldout.largest_document_share,
        **by_stratum,
        **by_part,
    }


def _label_losses(scores: Any, labels: Iterable[str], columns: Iterable[str]) -> dict[str, Any]:
    """``{column: loss}`` for each label (a stratum, a part) from a record's ``{label: {"loss", ...}}``."""
    scores = scores if isinstance(scores, dict) else {}
    return {
        column: scores[label].get("loss") if isinstance(scores.get(label), dict) else None
        for label, column in zip(labels, columns)
    }


def heldout_curve_columns(curve: Iterable[Any]) -> dict[str, Any]:
    """``{"heldout_at_<step>": loss}`` from summary.json's ``heldout_curve``, and
    ``{"heldout_document_at_<step>": document_loss}`` where the points have it."""
    points = [p for p in curve if isinstance(p, dict) and isinstance(p.get("step"), int)]
    columns = {f"{HELDOUT_AT}{point['step']}": point.get("loss") for point in points}
    columns.update(
        {f"{HELDOUT_DOCUMENT_AT}{p['step']}": p["document_loss"] for p in points if p.get("document_loss") is not None}
    )
    return columns


def curve_columns(runs: pd.DataFrame) -> list[str]:
    """The held-out curve columns some run has, token-weighted then document-weighted, each by step."""
    found = []
    for prefix in (HELDOUT_AT, HELDOUT_DOCUMENT_AT):
        columns = [c for c in runs if c.startswith(prefix) and runs[c].notna().any()]
        found += sorted(columns, key=lambda c: int(c[len(prefix) :]))
    return found
