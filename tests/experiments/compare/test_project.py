"""The project's one error rule on the committed suites: confirmatory claims (LRs fixed in advance) are one
Holm family across suites, exploratory ones get BH q-values, A/A suites stay out; and the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare import project
from andrea_lab.experiments.compare.claim_spec import parse_claims
from andrea_lab.experiments.compare.claims import Claim
from andrea_lab.experiments.compare.measured import Setup
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.experiments.compare.project import (
    MIN_SEEDS_PER_CELL,
    CommittedSuite,
    is_confirmatory,
    judged_claims,
    project_block,
    project_table,
    provenance_problems,
)

REPO = Path(__file__).resolve().parents[3]
RESULTS, SUITES = REPO / "docs" / "results", REPO / "experiments" / "suites"


def test_confirmatory_means_lrs_fixed_in_advance_and_not_marked_exploratory():
    assert is_confirmatory(Claim("lower_loss", "a", "b", lrs=(1e-3, 1e-3)))
    assert not is_confirmatory(Claim("lower_loss", "a", "b"))  # its LR chosen on the runs
    assert not is_confirmatory(Claim("lower_loss", "a", "b", lrs=(1e-3, 1e-3), exploratory=True))
    assert not is_confirmatory(Claim("lower_sensitivity", "a", "b"))


def test_the_project_family_is_holm_over_every_confirmatory_claim_and_bh_over_the_rest(committed_project):
    suites = committed_project
    judged, table = judged_claims(suites), project_table(suites)
    assert "aa" not in set(table["suite"]), "the A/A suite checks the statistics; it is not a hypothesis"
    # A scaled suite's claims are in the families: judged at each scale, and its trend across scales once.
    assert {"stability_width @ d64", "stability_width @ d256", "stability_width, across scales"} <= set(table["suite"])
    across = table[table["suite"] == "stability_width, across scales"]
    assert list(across["claim"]) and set(across["kind"]) == {"exploratory"}
    confirmatory = [r for r in judged["result"] if is_confirmatory(r.claim)]
    exploratory = [r for r in judged["result"] if not is_confirmatory(r.claim)]
    assert len(confirmatory) == (table["kind"] == "confirmatory").sum() == 55
    shown = table.loc[table["kind"] == "confirmatory", "project_p"].astype(float).tolist()
    assert shown == pytest.approx(holm([r.p for r in confirmatory]), rel=5e-3)
    bh = scipy_stats.false_discovery_control([1.0 if r.p != r.p else r.p for r in exploratory], method="bh")
    assert table.loc[table["kind"] == "exploratory", "project_p"].astype(float).tolist() == pytest.approx(bh, rel=5e-3)
    # Across the project, a suite's own verdict can fall: the per-suite family is smaller.
    decided = table[(table["kind"] == "confirmatory") & (table["outcome"] != "not detected")]
    # 2 activation_confirm, 1 mlp_ratio_confirm, 1 norm_placement_confirm, 1 norm_placement_tuned_confirm, 2 precision
    # + 4 english_precision (bf16 within ±0.03 nat of fp32 at two LRs, on each corpus), 4 english_activation, and
    # 2 english_norm_placement (pre below post at 4e-3, contradicted on each corpus). The larger the family, the
    # higher the bar: depth_confirm's three divergence claims joined it not detected, two of norm_placement_confirm's
    # verdicts fell below it, and english_norm_placement's eight claims took norm_placement_tuned_confirm's two
    # divergence claims (10 of 10 seeds, exact McNemar p 0.00195) from Holm p 0.043 to 0.0547. speed_equivalence_d64
    # adds one (bf16 with fp32 attention within ±0.03 nat at 1.6e-2; at 3.2e-2 its TOST p 0.00309 is Holm p 0.0741).
    # speed_equivalence adds four (eager and compiled bf16 within ±0.03 nat of fp32 at d256, both LRs); its six
    # claims take the family to 55, and speed_equivalence_d64's 3.2e-2 equivalence to Holm p 0.0803.
    assert len(decided) == 22
    exploratory_rows = table[table["kind"] == "exploratory"]
    assert all(
        "(lead)" in verdict
        or outcome == "not detected"
        or outcome.startswith("not judged")
        or outcome.startswith("too few seeds")  # lower_loss_trained where one pair of 10 trained: n=1
        for verdict, outcome in zip(exploratory_rows["verdict"], exploratory_rows["outcome"])
    )


def test_the_command_prints_the_project_table_and_refuses_a_directory_without_suites(tmp_path):
    ran = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", "compare", str(RESULTS), "--project", "--suites", str(SUITES)],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("200 claims in 30 suites: 55 confirmatory")
    bad = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", "compare", str(tmp_path), "--project"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "holds no <suite>/runs.csv" in bad.stderr and "Traceback" not in bad.stderr


def test_every_committed_suite_runs_five_seeds_per_cell_and_no_confirmatory_lr_was_chosen_on_its_own_seeds(
    committed_project,
):
    """The project's standard, on the committed tables: checked here so that a suite committed below it fails CI."""
    assert provenance_problems(committed_project) == []


def _suite(name, seeds, claims=(), lrs=(1e-3,), variants=("a", "b")):
    runs = pd.DataFrame([{"variant": v, "lr": lr, "seed": seed} for v in variants for lr in lrs for seed in seeds])
    return CommittedSuite(name, runs, tuple(claims))


def test_provenance_names_a_thin_cell_a_claim_without_its_lr_source_and_seeds_shared_with_that_source():
    tuning = _suite("tuning", range(5))
    thin = _suite("thin", range(MIN_SEEDS_PER_CELL - 1))
    assert provenance_problems([tuning, thin]) == ["thin: a cell holds 4 seeds (at least 5 wanted)"]
    one_thin_cell = CommittedSuite("uneven", tuning.runs.iloc[:-1], ())
    assert provenance_problems([one_thin_cell]) == ["uneven: a cell holds 4 seeds (at least 5 wanted)"]
    # A ladder's top rung may run 3 seeds (issue 54), its lower rungs 5; 2 at the top, or 3 below it, are thin.
    rungs = pd.concat([_suite("l", range(5)).runs.assign(scale="d64"), _suite("l", range(3)).runs.assign(scale="d256")])
    assert provenance_problems([CommittedSuite("ladder", rungs, (), scaled=True, top_rung="d256")]) == []
    top_thin = rungs[~((rungs["scale"] == "d256") & (rungs["seed"] == 2))]
    assert provenance_problems([CommittedSuite("ladder", top_thin, (), scaled=True, top_rung="d256")]) == [
        "ladder: a cell holds 2 seeds (at least 3 wanted)"
    ]
    assert provenance_problems([CommittedSuite("ladder", rungs, (), scaled=True, top_rung="d64")]) == [
        "ladder: a cell holds 3 seeds (at least 5 wanted)"
    ]

    def claim(**options):
        return {"lower_loss": ["a", "b"], "lr": 1e-3, **options}

    fresh = _suite("fresh", range(10, 15), [claim(lr_from=["tuning"]), claim(lr_from=["tuning"], lr=2e-3)])
    assert provenance_problems([tuning, fresh]) == []
    unsaid = _suite("unsaid", range(10, 15), [claim()])
    assert provenance_problems([tuning, unsaid]) == [
        "unsaid: lower_loss: a vs b @ 1e-3 does not say where its LRs were chosen (lr_from:)"
    ]
    reused = _suite("reused", range(3, 8), [claim(lr_from=["tuning"])])
    assert provenance_problems([tuning, reused]) == [
        "reused: lower_loss: a vs b @ 1e-3 is judged on seeds [3, 4] that also chose its LRs in tuning"
    ]
    missing = _suite("missing", range(10, 15), [claim(lr_from=["nowhere"])])
    assert provenance_problems([missing]) == [
        "missing: lower_loss: a vs b @ 1e-3 names lr_from 'nowhere', not a committed suite"
    ]
    # Exploratory claims choose their LR on the runs by design; they carry no provenance to check.
    assert (
        provenance_problems([tuning, _suite("leads", range(5), [claim(exploratory=True), {"lower_loss": ["a", "b"]}])])
        == []
    )


@pytest.mark.parametrize(
    "item, why",
    [
        ({"lower_loss": ["a", "b"], "lr_from": ["s"]}, "this claim fixes no lr"),
        ({"lower_loss": ["a", "b"], "lr": 1e-3, "lr_from": "s"}, "lr_from must be a list of suite names"),
        ({"lower_loss": ["a", "b"], "lr": 1e-3, "lr_from": []}, "lr_from must be a list of suite names"),
        ({"lower_loss": ["a", "b"], "lr": 1e-3, "lr_from": [""]}, "lr_from must be a list of suite names"),
    ],
)
def test_lr_from_is_a_list_of_suite_names_beside_a_fixed_lr(item, why):
    with pytest.raises(ValueError, match=why):
        parse_claims([item])


def _failing_runs(failure: str) -> pd.DataFrame:
    """Eight seeds at one LR (McNemar needs 6 discordant pairs for p < 0.05): A trains on every seed, B ends
    with ``failure`` on every seed."""
    rows = [
        dict(
            variant=variant,
            lr=1e-3,
            seed=seed,
            status="finished" if outcome == "trained" else "diverged",
            outcome=outcome,
            initial_val_loss=5.0,
            final_val_loss=2.0 if outcome == "trained" else 5.0,
            divergence_kind=None,
        )
        for seed in range(8)
        for variant, outcome in (("a", "trained"), ("b", failure))
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "failure, agrees", [("blew_up", "agrees"), ("stuck", "different quantity (paper: blew_up; ours: stuck)")]
)
def test_the_verdict_table_says_agrees_only_when_the_claim_counted_what_the_paper_measured(failure, agrees):
    """One cited blow-up result, two constructed suites: where B's runs blew up the proxy agrees with it; where
    they sat on the unigram plateau the same count, the same direction and the same p are a different quantity."""
    cited = {
        "source": "Someone 2024",
        "result": "B blows up where A does not",
        "quantity": "blew_up",
        "model": "a 1B decoder",
        "tokens": "not stated",
        "metric": "non-finite loss",
    }
    claim = {"fewer_divergences": ["a", "b"], "lr": 1e-3, "lr_from": ["elsewhere"], "published": cited}
    suite = CommittedSuite("cited", _failing_runs(failure), (claim,), setups={"a": Setup(300_032, 512_000)})
    (row,) = project_table([suite]).to_dict("records")
    assert row["outcome"] == "reproduced" and row["measured"] == failure and row["agrees"] == agrees
    assert row["published"].startswith("Someone 2024: B blows up where A does not; measured: blew_up on a 1B")
    assert row["ours"] == "model size not counted, runs counted by outcome (exact McNemar)", "b's size unknown"
    block = project_block([suite])
    header = (
        "| counted | effect (95 % CI, unadjusted), seeds | project Holm p | published result (what the paper measured)"
    )
    assert header in block and f"| {agrees} |" in block


def test_the_sentence_against_the_papers_counts_the_agrees_column_of_verdicts_and_leads():
    verdicts = pd.DataFrame({"agrees": ["agrees", "", "different quantity (paper: loss; ours: loss vs plateau)"]})
    leads = pd.DataFrame({"agrees": ["disagrees", "agrees", "agrees", ""]})
    assert project.cited_sentence(verdicts, leads) == (
        "Against the papers: of the 2 verdicts that cite a paper, 1 agree, 0 disagree, 1 compare different "
        "quantities; of the 3 leads that cite a paper, 2 agree, 1 disagree, 0 compare different quantities."
    )
