"""The project's one error rule on the committed suites: confirmatory claims (LRs fixed in advance) are one
Holm family across suites, exploratory ones get BH q-values, A/A suites stay out; and the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from andrea_lab.commands.compare import committed_suites
from andrea_lab.experiments.compare.claims import Claim
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.experiments.compare.project import is_confirmatory, judged_claims, project_table

REPO = Path(__file__).resolve().parents[3]
RESULTS, SUITES = REPO / "docs" / "results", REPO / "experiments" / "suites"


def test_confirmatory_means_lrs_fixed_in_advance_and_not_marked_exploratory():
    assert is_confirmatory(Claim("lower_loss", "a", "b", lrs=(1e-3, 1e-3)))
    assert not is_confirmatory(Claim("lower_loss", "a", "b"))  # its LR chosen on the runs
    assert not is_confirmatory(Claim("lower_loss", "a", "b", lrs=(1e-3, 1e-3), exploratory=True))
    assert not is_confirmatory(Claim("lower_sensitivity", "a", "b"))


def test_the_project_family_is_holm_over_every_confirmatory_claim_and_bh_over_the_rest():
    suites = committed_suites(RESULTS, SUITES)
    judged, table = judged_claims(suites), project_table(suites)
    assert "aa" not in set(table["suite"]), "the A/A suite checks the statistics; it is not a hypothesis"
    confirmatory = [r for r in judged["result"] if is_confirmatory(r.claim)]
    exploratory = [r for r in judged["result"] if not is_confirmatory(r.claim)]
    assert len(confirmatory) == (table["kind"] == "confirmatory").sum() == 14
    shown = table.loc[table["kind"] == "confirmatory", "project_p"].astype(float).tolist()
    assert shown == pytest.approx(holm([r.p for r in confirmatory]), rel=5e-3)
    bh = scipy_stats.false_discovery_control([1.0 if r.p != r.p else r.p for r in exploratory], method="bh")
    assert table.loc[table["kind"] == "exploratory", "project_p"].astype(float).tolist() == pytest.approx(bh, rel=5e-3)
    # Across the project, a suite's own verdict can fall: the per-suite family is smaller.
    decided = table[(table["kind"] == "confirmatory") & (table["verdict"] != "not detected")]
    assert len(decided) == 7  # 2 of them activation_confirm's (2026-12-04)
    assert all(
        v.endswith("(lead)") or v == "not detected" for v in table.loc[table["kind"] == "exploratory", "verdict"]
    )


def test_the_command_prints_the_project_table_and_refuses_a_directory_without_suites(tmp_path):
    ran = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", "compare", str(RESULTS), "--project", "--suites", str(SUITES)],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("51 claims in 11 suites: 14 confirmatory")
    bad = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", "compare", str(tmp_path), "--project"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "holds no <suite>/runs.csv" in bad.stderr and "Traceback" not in bad.stderr
