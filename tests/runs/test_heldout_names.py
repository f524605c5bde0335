"""The held-out loss is said with its form wherever a line shows it: the fit's (and validate's) closing line and
the sweep's lines name the document-weighted score that ``andrea compare`` ranks, and the token-weighted loss
beside it or in its place."""

from __future__ import annotations

import dataclasses

from andrea_lab.experiments.sweep.runner import loss_words
from andrea_lab.fit.heldout import format_heldout
from andrea_lab.runs.directory import HeldOut, RunRecord
from andrea_lab.runs.heldout_names import DOCUMENT_WEIGHTED, TOKEN_WEIGHTED, scored_form

BY_TOKEN_ONLY = HeldOut(5.162, 0.049, 84_864, 30, 663, 84_895, True, "documents", 0)
BOTH = dataclasses.replace(BY_TOKEN_ONLY, document_loss=5.218, document_se=0.052)


def test_the_ranked_form_is_the_document_weighted_score_where_a_record_has_it():
    assert scored_form(5.218, 5.162) == (DOCUMENT_WEIGHTED, 5.218)
    assert scored_form(None, 5.162) == (TOKEN_WEIGHTED, 5.162), "records from before the document-weighted score"


def test_the_fits_line_names_both_forms_the_ranked_one_first():
    assert format_heldout(BOTH) == (
        "(document-weighted) 5.218 ± 0.052, token-weighted 5.162 ± 0.049 (SE over 30 documents, 84,864 tokens)"
    )
    assert format_heldout(BY_TOKEN_ONLY) == "(token-weighted) 5.162 ± 0.049 (SE over 30 documents, 84,864 tokens)"


def test_a_sweep_line_names_the_form_it_shows():
    record = RunRecord(status="finished", initial_val_loss=9.0, final_val_loss=5.4, steps=200, heldout=BOTH)
    assert loss_words(record) == "held-out (document-weighted) 5.22"
    assert loss_words(dataclasses.replace(record, heldout=BY_TOKEN_ONLY)) == "held-out (token-weighted) 5.16"
    assert loss_words(dataclasses.replace(record, heldout=None)) == "val 5.40"


def test_an_se_over_fewer_than_ten_documents_is_said_to_be_rough():
    few = dataclasses.replace(BY_TOKEN_ONLY, documents=2)
    assert format_heldout(few).endswith(
        "(SE over 2 documents, 84,864 tokens; only 2 documents: a rough SE, the score of a few files)"
    )
    assert "rough" not in format_heldout(dataclasses.replace(BY_TOKEN_ONLY, documents=10))
