"""The held-out record by document: per-document sums from which both scores recompute, the documents'
names, the document-weighted score, and compare's choice of the score it ranks by."""

from __future__ import annotations

import contextlib
import shutil
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from andrea_testing import byte_datamodule

from andrea_lab.data.datamodule import AndreaDataModule
from andrea_lab.data.heldout import capped_mean, clustered_mean
from andrea_lab.data.judging_split import SELECTION, TEST
from andrea_lab.data.split import name_score
from andrea_lab.experiments.compare.claim_spec import Claim
from andrea_lab.experiments.compare.claims import check_alike
from andrea_lab.experiments.compare.compare import scored_loss_column
from andrea_lab.experiments.compare.heldout_columns import heldout_curve_columns
from andrea_lab.experiments.compare.steps import curve_of
from andrea_lab.fit.heldout import HeldOutEvaluation


class _PerTokenLoss(torch.nn.Module):
    """Logits that favour each token's own byte value a fixed amount: a loss that differs by document."""

    def forward(self, x: torch.Tensor):
        logits = torch.zeros(*x.shape, 257)
        logits.scatter_(-1, x.unsqueeze(-1), 3.0)
        return logits, None


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> AndreaDataModule:
    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py", "this.py"):
        shutil.copy(stdlib / name, root / name)
    for name in ("abc.py", "keyword.py", "numbers.py", "queue.py", "sched.py", "copy.py", "glob.py"):
        shutil.copy(stdlib / name, root / name)
    held_out = min(sorted(p.name for p in root.iterdir()), key=name_score)  # its family is held out (30 %)
    shutil.copy(root / held_out, root / f"zz_copy_of_{held_out}")  # a near-copy: one family with it
    return byte_datamodule(root, tmp_path_factory.mktemp("cache"))


def _evaluate(data: AndreaDataModule):
    trainer = SimpleNamespace(
        datamodule=data,
        global_rank=0,
        world_size=1,
        precision_plugin=SimpleNamespace(forward_context=contextlib.nullcontext),
    )
    module = SimpleNamespace(device=torch.device("cpu"), model=_PerTokenLoss())
    return HeldOutEvaluation(max_tokens=4096).evaluate(trainer, module)


def test_the_record_keeps_every_documents_sums_and_both_scores_recompute_from_them(data) -> None:
    heldout = _evaluate(data)
    per = heldout.per_document
    sums, tokens = np.array(per["loss_sums"]), np.array(per["tokens"])
    assert tokens.sum() == heldout.tokens and len(tokens) == heldout.documents >= 3
    assert per["names"] and set(per["names"]) <= set(data.val_document_names())
    assert clustered_mean(sums, tokens) == pytest.approx((heldout.loss, heldout.se))
    assert capped_mean(sums, tokens) == pytest.approx(
        (heldout.document_loss, heldout.document_se, heldout.document_cap, heldout.largest_document_share)
    )
    assert heldout.document_loss != pytest.approx(heldout.loss)  # documents of different lengths and losses
    strata = np.array(per["strata"])
    assert len(strata) == len(tokens) and set(strata) <= {"code", "prose"}
    for stratum, score in heldout.strata.items():  # each stratum's score recomputes from its documents' sums
        mine = strata == stratum
        assert score["documents"] == mine.sum() and score["tokens"] == tokens[mine].sum()
        assert capped_mean(sums[mine], tokens[mine])[:2] == pytest.approx((score["loss"], score["se"]))


def test_the_record_splits_its_documents_by_family_into_a_selection_and_a_test_part(data) -> None:
    """A near-copy of a held-out file is in its family and its part; each part's score recomputes from its sums."""
    names, families = data.val_document_names(), data.val_document_families()
    assert len(families) == len(names)
    copies = [name for name in names if name.startswith("zz_copy_of_")]
    assert len(copies) == 1, names
    original = copies[0].removeprefix("zz_copy_of_")
    assert families[names.index(copies[0])] == families[names.index(original)] == original
    heldout = _evaluate(data)
    per = heldout.per_document
    parts, sums, tokens = np.array(per["parts"]), np.array(per["loss_sums"]), np.array(per["tokens"])
    assert set(parts) == {SELECTION, TEST} and len(parts) == len(tokens)
    side = {}
    for family, part in zip(per["families"], per["parts"]):
        assert side.setdefault(family, part) == part, f"family {family} on both sides"
    for part, score in heldout.parts.items():
        mine = parts == part
        assert score["documents"] == mine.sum() and score["tokens"] == tokens[mine].sum()
        assert capped_mean(sums[mine], tokens[mine])[:2] == pytest.approx((score["loss"], score["se"]))


def test_compare_ranks_by_the_document_weighted_score_only_when_every_scored_run_has_it() -> None:
    runs = pd.DataFrame(
        {
            "status": ["finished"] * 3,
            "heldout_loss": [1.0, 1.1, None],
            "heldout_document_loss": [1.2, 1.3, None],
            "final_val_loss": [1.0, 1.0, 1.0],
        }
    )
    assert scored_loss_column(runs) == "heldout_document_loss"
    older = runs.assign(heldout_document_loss=[1.2, None, None])  # one run recorded before the score existed
    assert scored_loss_column(older) == "heldout_loss"
    assert scored_loss_column(runs.drop(columns=["heldout_document_loss"])) == "heldout_loss"
    split = runs.assign(heldout_selection_loss=[1.1, 1.2, None], heldout_test_loss=[1.3, 1.4, None])
    assert scored_loss_column(split) == "heldout_test_loss"  # chosen on selection, judged on test
    assert scored_loss_column(split.assign(heldout_test_loss=[1.3, None, None])) == "heldout_document_loss"


def test_the_curve_is_the_one_of_the_score_compare_ranks_by() -> None:
    columns = heldout_curve_columns(
        [{"step": 100, "loss": 2.0, "se": 0.1, "document_loss": 2.5}, {"step": 200, "loss": 1.8, "se": 0.1}]
    )
    assert columns == {"heldout_at_100": 2.0, "heldout_at_200": 1.8, "heldout_document_at_100": 2.5}
    row = {**columns, "heldout_loss": 1.5, "heldout_document_loss": 1.9, "steps": 300}
    assert curve_of(row, "heldout_loss") == [(100, 2.0), (200, 1.8), (300, 1.5)]
    assert curve_of(row, "heldout_document_loss") == [(100, 2.5), (300, 1.9)]


def test_a_claim_between_runs_on_different_splits_is_refused() -> None:
    runs = pd.DataFrame({"variant": ["a", "b"], "split_version": ["2", "1"]})
    claim = Claim("lower_loss", "a", "b")
    with pytest.raises(ValueError, match=r"differ in split_version \(a: 2; b: 1\)"):
        check_alike(claim, runs)
    check_alike(Claim("lower_loss", "a", "b", across=("split_version",)), runs)
