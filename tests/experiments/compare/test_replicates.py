"""The replicate table: runs matched by variant, LR and seed across two directories; bit-identical pairs
counted; the replicate sd from the pairs' differences; the seed sd from the first directory."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_lab.experiments.compare.replicates import replicate_rows
from andrea_lab.runs.directory import HeldOut, RunRecord, run_version, write_record

REPO = Path(__file__).resolve().parents[3]


def write_run(runs: Path, variant: str, lr: float, seed: int, document_loss: float, status: str = "finished"):
    heldout = HeldOut(
        loss=document_loss + 0.5, se=0.01, tokens=100, documents=3, windows=2, split_tokens=100,
        sampled=False, se_unit="document", seed=0, document_loss=document_loss,
    )  # fmt: skip
    write_record(runs / variant / run_version(lr, seed), RunRecord(status=status, heldout=heldout))


def test_pairs_are_matched_by_seed_and_summarised_per_lr(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    for seed, score in enumerate([2.0, 2.2, 2.4]):
        write_run(first, "a", 1e-2, seed, score)
    write_run(second, "a", 1e-2, 0, 2.0)  # bit-identical
    write_run(second, "a", 1e-2, 1, 2.23)  # 0.03 apart
    write_run(second, "a", 1e-2, 5, 9.0)  # a seed the first directory lacks: not paired
    write_run(second, "a", 1e-2, 2, 7.0, status="interrupted")  # no score: not paired
    write_run(first, "a", 2e-2, 0, 3.0)  # an LR the second lacks: no row
    (row,) = replicate_rows(first, second)
    assert (row.variant, row.lr, row.pairs, row.identical) == ("a", 1e-2, 2, 1)
    assert row.max_abs_difference == pytest.approx(0.03)
    assert row.replicate_sd == pytest.approx(math.sqrt((0.0**2 + 0.03**2) / 2 / 2))
    assert row.seed_sd == pytest.approx(0.2)


def test_the_script_prints_the_table_and_refuses_what_does_not_match(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    write_run(first, "a", 1e-2, 0, 2.0)
    write_run(second, "a", 1e-2, 0, 2.0)
    script = [sys.executable, str(REPO / "scripts" / "replicate_spread.py")]
    out = subprocess.run([*script, str(first), str(second)], capture_output=True, text=True, check=True).stdout
    assert "| a | 1e-2 | 1 | 1/1 | 0.00e+00 | 0.00e+00 | - |" in out
    refused = subprocess.run([*script, str(first), str(tmp_path / "none")], capture_output=True, text=True)
    assert refused.returncode == 2 and "is not a directory of runs" in refused.stderr
    (tmp_path / "empty").mkdir()
    unmatched = subprocess.run([*script, str(first), str(tmp_path / "empty")], capture_output=True, text=True)
    assert unmatched.returncode == 2 and "no run in" in unmatched.stderr
