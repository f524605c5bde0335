"""Fewer than 3 seeds give a lead, never a bold verdict: the claims table, the project table and the verdict
lines read "too few seeds (n=2) — lead only" where the same differences on 3 seeds are a verdict."""

from __future__ import annotations

import pandas as pd
import pytest

from andrea_lab.experiments.compare import compare, report
from andrea_lab.experiments.compare.claims import evaluate_claims
from andrea_lab.experiments.compare.project import CommittedSuite, project_block, project_table
from andrea_lab.experiments.compare.too_few import is_too_few, lead_only, too_few_seeds

LR = 1e-3
CLAIM = {"lower_loss": ["a", "b"], "lr": LR}
#: The stability columns the variant table reads (any values: only the loss is compared here).
STABILITY = {"grad_norm_median": 1.0, "grad_norm_max_after_warmup": 2.0, "spike_count": 0}


def runs(seeds: int) -> pd.DataFrame:
    """A 0.5 nat lower than B on every seed, at one LR: a clear difference, however few the seeds."""
    rows = []
    for seed in range(seeds):
        for variant, loss in (("a", 2.0 + 0.01 * seed), ("b", 2.5 + 0.003 * seed)):
            rows.append(
                dict(
                    variant=variant,
                    lr=LR,
                    seed=seed,
                    initial_val_loss=5.0,
                    final_val_loss=loss,
                    status="finished",
                    divergence_kind=None,
                    **STABILITY,
                )
            )
    return pd.DataFrame(rows)


def test_the_words_and_the_threshold():
    assert lead_only(2) == "too few seeds (n=2) — lead only" and is_too_few(lead_only(2))
    assert [too_few_seeds(n) for n in (0, 1, 2, 3)] == [False, True, True, False]


@pytest.mark.parametrize("seeds, expected", [(2, "too few seeds (n=2) — lead only"), (3, "reproduced")])
def test_a_claim_on_two_seeds_is_a_lead_and_not_bold(seeds, expected):
    (result,) = evaluate_claims([CLAIM], runs(seeds), "final_val_loss")
    assert result.outcome == expected
    table = compare.claims_table(runs(seeds), [CLAIM], "final_val_loss")
    shown = report.markdown_table(report.claim_columns(table), table)
    assert ("**" not in shown.splitlines()[-1]) == (seeds < 3)


@pytest.mark.parametrize("seeds", [2, 3])
def test_the_project_table_counts_no_verdict_from_two_seeds(seeds):
    claim = {**CLAIM, "lr_from": ["elsewhere"]}
    suite = CommittedSuite("mine", runs(seeds), (claim,))
    (row,) = project_table([suite]).to_dict("records")
    assert row["kind"] == "confirmatory"
    assert row["verdict"] == ("too few seeds (n=2) — lead only" if seeds == 2 else "reproduced")
    header = project_block([suite]).split("\n\n")[0]
    assert ("0 verdicts" in header and "1 from fewer than 3 paired seeds" in header) == (seeds == 2)
    assert ("1 verdicts" in header and "paired seeds" not in header) == (seeds == 3)


@pytest.mark.parametrize("seeds", [2, 3])
def test_the_verdict_line_is_not_bold_below_three_seeds(seeds):
    variants = compare.build_variants(runs(seeds), "b", "final_val_loss")
    (line,) = report.verdict_lines(variants)
    if seeds == 2:
        assert "too few seeds (n=2) — lead only, difference" in line and "**better**" not in line
    else:
        assert "**better**" in line and "too few" not in line
    versus = compare.variant_table(variants).set_index("variant").loc["a", "vs_reference"]
    assert versus.startswith("too few seeds (n=2) — lead only:" if seeds == 2 else "better:")


def test_the_verdict_line_says_no_seed_is_paired_yet_where_there_is_one_seed_and_prints_no_nan():
    """A rung still running (one seed of each variant): the cross-fit has nothing to pair, and the line says so
    instead of ``difference nan [nan, nan], n=0``."""
    variants = compare.build_variants(runs(1), "b", "final_val_loss")
    (line,) = report.verdict_lines(variants)
    assert "no paired seed yet" in line and "nan" not in line and "**better**" not in line
