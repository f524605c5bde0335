"""No verdict from an unfound optimum (issue 55): on constructed tables, a claim whose variant's best LR sits at
the edge of its grid (in-sample, or one seed's cross-fitted pick) is not judged and says which way to extend
the grid; the same claim on a grid that brackets both optima is judged; a claim at a fixed LR off a variant's
own optimum says so; the project table counts neither kind of unjudged claim as a verdict or a lead."""

from __future__ import annotations

import pandas as pd
import pytest

from andrea_lab.experiments.compare import optimum_edges, stats
from andrea_lab.experiments.compare.claims import Claim, evaluate_claim
from andrea_lab.experiments.compare.project import CommittedSuite, project_block, project_table

LRS = (1e-3, 2e-3, 4e-3, 8e-3)
SEEDS = range(5)


def _runs(curves: dict[str, dict[float, float]], seed_noise: float = 0.002) -> pd.DataFrame:
    """A runs table: every variant's mean loss per LR, each seed offset by ``seed_noise * seed`` (shared by the
    variants, as the same seed's batches are), plus a small per-(variant, seed) wobble so intervals are finite."""
    rows = []
    for number, (variant, by_lr) in enumerate(curves.items()):
        for lr, loss in by_lr.items():
            for seed in SEEDS:
                wobble = 0.001 * ((seed * (number + 3)) % 5 - 2)
                rows.append(
                    dict(
                        variant=variant,
                        lr=lr,
                        seed=seed,
                        initial_val_loss=5.0,
                        final_val_loss=loss + seed_noise * seed + wobble,
                        status="finished",
                        divergence_kind=None,
                    )
                )
    return pd.DataFrame(rows)


#: A still falling at the grid's top: its optimum lies above 8e-3. B bracketed, best at 2e-3.
AT_EDGE = {"a": {1e-3: 2.60, 2e-3: 2.50, 4e-3: 2.40, 8e-3: 2.30}, "b": {1e-3: 2.55, 2e-3: 2.45, 4e-3: 2.50, 8e-3: 2.60}}
#: The same, with A's grid extended to 1.6e-2 and 3.2e-2 where it turns: both optima inside their grids.
INTERIOR = {"a": {**AT_EDGE["a"], 1.6e-2: 2.28, 3.2e-2: 2.45}, "b": AT_EDGE["b"]}


def _counted(curves) -> pd.DataFrame:
    return stats.counted_runs(_runs(curves), "final_val_loss")


def test_edge_of_names_the_end_and_nothing_inside_or_without_a_grid():
    assert optimum_edges.edge_of(1e-3, LRS) == "lowest"
    assert optimum_edges.edge_of(8e-3, LRS) == "highest"
    assert optimum_edges.edge_of(2e-3, LRS) is None
    assert optimum_edges.edge_of(1e-3, (1e-3,)) is None, "one LR tunes nothing"
    assert optimum_edges.edge_of(float("nan"), LRS) is None, "a seed with no LR chosen"


def test_a_best_lr_at_the_top_of_the_grid_is_found_and_says_extend_above():
    (edge,) = optimum_edges.pair_edges(_counted(AT_EDGE), "a", "b")
    assert (edge.variant, edge.lr, edge.edge, edge.direction, edge.chosen) == (
        "a",
        8e-3,
        "highest",
        "above",
        "in-sample",
    )
    assert edge.describe() == "a's optimum at the grid's highest LR (8e-3); extend the grid above"


def test_one_seeds_cross_fitted_pick_at_an_edge_is_enough():
    # The in-sample best is 2e-3, but seed 4's pick (chosen on seeds 0-3) is 1e-3: that seed is judged at an edge.
    found = optimum_edges.optimum_edge("b", LRS, 2e-3, {0: 2e-3, 1: 2e-3, 2: 2e-3, 3: 2e-3, 4: 1e-3})
    assert found is not None and (found.lr, found.edge, found.chosen) == (
        1e-3,
        "lowest",
        "seed 4, chosen on the others",
    )
    assert optimum_edges.optimum_edge("b", LRS, 2e-3, dict.fromkeys(SEEDS, 4e-3)) is None


def test_a_claim_resting_on_an_edge_optimum_is_not_judged():
    claim = Claim("lower_loss", "a", "b")
    result = evaluate_claim(claim, _runs(AT_EDGE))
    assert result.outcome == "not judged: a's optimum at the grid's highest LR (8e-3); extend the grid above"
    assert result.p < 0.05 and result.favours_a, "the statistics alone would have called it reproduced"
    assert "a − b = " in result.evidence, "the evidence is still shown"


def test_the_same_claim_with_both_optima_inside_their_grids_is_judged():
    runs = _runs(INTERIOR)
    assert optimum_edges.pair_edges(stats.counted_runs(runs, "final_val_loss"), "a", "b") == []
    result = evaluate_claim(Claim("lower_loss", "a", "b", unequal_budgets=True), runs)
    assert result.outcome == "reproduced", result.evidence
    assert result.caveat == ""


@pytest.mark.parametrize("kind", ["lower_sensitivity", "equivalent_loss", "lower_loss_trained"])
def test_every_claim_measured_from_an_optimum_is_checked(kind):
    claim = Claim(kind, "b", "a", margin=0.05 if kind == "equivalent_loss" else None)
    assert optimum_edges.claim_edges(claim, _counted(AT_EDGE))[0].variant == "a"
    assert evaluate_claim(claim, _runs(AT_EDGE)).outcome.startswith("not judged: a's optimum")


def test_divergence_claims_and_claims_at_fixed_lrs_rest_on_no_optimum():
    counted = _counted(AT_EDGE)
    assert optimum_edges.claim_edges(Claim("fewer_divergences", "a", "b"), counted) == []
    assert optimum_edges.claim_edges(Claim("lower_loss", "a", "b", lrs=(4e-3, 4e-3)), counted) == []


def test_a_claim_at_a_shared_lr_off_a_variants_optimum_says_so():
    runs = _runs(AT_EDGE)
    result = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(4e-3, 4e-3)), runs)
    assert result.outcome == "reproduced"
    assert result.caveat == (
        "at a shared LR, off a's own optimum (8e-3) and b's own optimum (2e-3); "
        "best LR here at an edge, optimum not bracketed: a 8e-3 (its grid's highest)"
    )
    at_each_best = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(1.6e-2, 2e-3)), _runs(INTERIOR))
    assert at_each_best.caveat == "", "each side at its own best LR, inside its grid: nothing to say"
    only_fixed = _runs({name: {4e-3: curve[4e-3]} for name, curve in AT_EDGE.items()})
    assert evaluate_claim(Claim("lower_loss", "a", "b", lrs=(4e-3, 4e-3)), only_fixed).caveat == "", (
        "no grid: no optimum"
    )


def test_a_fixed_lr_at_a_best_that_sits_on_the_grids_edge_says_so_in_its_row():
    """The gap issue 55 item 4 left: fixed at each side's best LR, but A's best is the top of its grid, so "A at
    its best" is A where its grid stopped. The row says so; with A's grid extended past its turn, it does not."""
    fixed_at_best = Claim("lower_loss", "a", "b", lrs=(8e-3, 2e-3))
    result = evaluate_claim(fixed_at_best, _runs(AT_EDGE))
    assert result.caveat == "at fixed LRs; best LR here at an edge, optimum not bracketed: a 8e-3 (its grid's highest)"
    suite = CommittedSuite("edges", _runs(AT_EDGE), ({"lower_loss": ["a", "b"], "lr": {"a": 8e-3, "b": 2e-3}},))
    (row,) = project_table([suite]).to_dict("records")
    assert row["verdict"] == f"{row['outcome']} ({result.caveat})", "in the verdict table's own row"
    two_lrs = _runs({name: {2e-3: curve[2e-3], 4e-3: curve[4e-3]} for name, curve in INTERIOR.items()})
    at_two = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(4e-3, 2e-3)), two_lrs).caveat
    assert at_two.endswith("a 4e-3 (its grid's highest), b 2e-3 (its grid's lowest)"), "two LRs bracket nothing"


def test_the_project_table_counts_an_unjudged_claim_as_neither_verdict_nor_lead():
    claims = (
        {"lower_loss": ["a", "b"], "text": "tuned: A at an edge"},
        {"lower_loss": ["a", "b"], "lr": 4.0e-3, "lr_from": ["elsewhere"]},
    )
    suite = CommittedSuite("edges", _runs(AT_EDGE), claims)
    table = project_table([suite]).set_index("claim")
    unjudged = table.loc["lower_loss: a vs b"]
    assert unjudged["verdict"].startswith("not judged: a's optimum at the grid's highest LR (8e-3)")
    assert "(lead)" not in unjudged["verdict"]
    fixed = table.loc["lower_loss: a vs b @ 4e-3"]
    assert fixed["verdict"] == (
        "reproduced (at a shared LR, off a's own optimum (8e-3) and b's own optimum (2e-3); "
        "best LR here at an edge, optimum not bracketed: a 8e-3 (its grid's highest))"
    )
    block = project_block([suite])
    assert "1 verdicts; 1 exploratory, with BH q-values: 0 leads at q < 0.05" in block
    assert "1 not judged (a variant's optimum at the edge of its LR grid" in block
