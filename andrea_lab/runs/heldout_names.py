"""The two forms of the held-out loss and their names, spelled once for every line that shows one.

The end-of-fit evaluation (:mod:`andrea_lab.fit.heldout`) gives two numbers from the same windows: the mean over
every scored token (summary.json ``heldout.loss``, ``heldout/loss`` in TensorBoard; bits per byte is this one per
byte of text) and the document-weighted score, in which each document's tokens are capped so that no held-out
file carries more than 5 % (``heldout.document_loss``). A long file weighs more by token, so the two differ, and a
number shown without its name reads as a contradiction between the fit's line and ``andrea compare``'s tables.
The document-weighted score is what ``andrea compare`` ranks (its "scored on the held-out loss (document-
weighted)" line), so where both are shown it comes first; records from before it was kept have the token-weighted
one only, named as such.
"""

from __future__ import annotations

from typing import Optional

DOCUMENT_WEIGHTED = "document-weighted"
TOKEN_WEIGHTED = "token-weighted"


def scored_form(document_loss: Optional[float], token_loss: Optional[float]) -> tuple[str, Optional[float]]:
    """The held-out number a run is ranked on, with its name: the document-weighted score where the record has
    it, else the token-weighted loss."""
    if document_loss is not None:
        return DOCUMENT_WEIGHTED, document_loss
    return TOKEN_WEIGHTED, token_loss
