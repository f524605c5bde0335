"""The closing sample's prompt follows the corpus: ``def `` on code, a sentence's start on English prose, and the
fit's ``next:`` line offers the same prompt to ``andrea generate``."""

from __future__ import annotations

from andrea_lab.fit.closing_sample import PROMPT, prompt_for
from andrea_lab.fit.summary import closing_lines
from andrea_lab.runs.directory import HeldOut, RunRecord


def strata(code: int, prose: int) -> dict:
    return {"code": {"tokens": code, "documents": 3}, "prose": {"tokens": prose, "documents": 3}}


def test_the_prompt_is_that_of_the_stratum_with_most_held_out_tokens():
    assert prompt_for(strata(code=900, prose=100)) == "def "
    assert prompt_for(strata(code=0, prose=5000)) == "The "
    assert prompt_for(None) == prompt_for({}) == PROMPT == "def ", "unknown strata: code's"


def test_an_english_runs_closing_lines_show_and_offer_the_english_prompt(tmp_path):
    heldout = HeldOut(4.2, 0.1, 1000, 12, 20, 5000, True, "documents", 0, strata=strata(code=0, prose=1000))
    record = RunRecord(status="finished", initial_val_loss=9.0, steps=200, heldout=heldout)
    run = tmp_path / "runs" / "mine" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    text = closing_lines(record, run, run / "summary.json", sample="The cat sat.")
    assert "sample ('The ' continued" in text and "--prompt 'The '" in text and "'def '" not in text, text
