"""`andrea heldout`: the composition of the default held-out score, printed and asserted on the default corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from andrea_lab import cli
from andrea_lab.data.families import OVERLAP_BOUND
from andrea_lab.data.heldout import MAX_DOCUMENT_SHARE

REPO = Path(__file__).resolve().parents[2]


def test_the_default_score_is_no_longer_one_document(tmp_path, monkeypatch, capsys) -> None:
    """cpu-base's held-out score: one file (pydoc_data/topics.py) is most of the scored tokens, so the
    token-weighted loss is mostly that file; the document-weighted score holds it to MAX_DOCUMENT_SHARE, and
    the held-out side's text found verbatim in training stays under OVERLAP_BOUND."""
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    assert cli.main(["heldout", "--config", str(REPO / "experiments/cpu-base.yaml"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["settings"]["max_tokens"] == 262_144 and found["split_version"] == 2
    assert found["scored_tokens"] == 262_144 and found["scored_units"] >= 20
    assert found["largest"][0]["token_share"] > 0.5
    assert found["largest_document_share"] <= MAX_DOCUMENT_SHARE + 1e-9
    assert found["window_overlap"] < OVERLAP_BOUND
    assert set(found["strata"]) == {"code", "prose"} and found["strata"]["prose"]["token_share"] > 0.5
    assert cli.main(["heldout", "--config", str(REPO / "experiments/cpu-base.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "of the document-weighted score" in printed and "found verbatim in training" in printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "missing.yaml"], "missing.yaml"),
        (["--val-fraction", "1.5"], "val_fraction must be strictly between 0 and 1, got 1.5"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, monkeypatch, capsys, args, message) -> None:
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["heldout", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_single_file_corpus_is_one_document_split_by_position(tmp_path, monkeypatch, capsys) -> None:
    """One file has no held-out document by name (its tail is held out): the manifest's empty list of names
    indexed by the plan's unit 0 was an IndexError."""
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "one"
    corpus.mkdir()
    (corpus / "a.txt").write_text("a single file corpus, a few words long, repeated\n" * 200)
    assert cli.main(["heldout", "--corpus", str(corpus), "--tokenizer", "byte", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["scored_units"] == 1 and found["held_out_documents"] is None and found["strata"] is None
    assert found["largest"][0]["name"] == "document 0" and found["largest"][0]["token_share"] == 1.0
