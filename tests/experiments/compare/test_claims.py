"""Claims judged without the winner's curse and as a Holm family: the known answers of
shared/design/STATISTICS.md (leave-one-seed-out on the committed norm_placement runs, Holm over the December
claims), a constructed table where only the in-sample interval excludes 0, LRs fixed in advance, the loss
of the runs that trained, and exploratory claims outside the family."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.compare import claims as claims_module
from andrea_lab.experiments.compare.claims import Claim, evaluate_claim, evaluate_claims, parse_claims
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.experiments.compare.runs_table import read_runs_csv
from andrea_lab.experiments.sweep.suite import load_suite

REPO = Path(__file__).resolve().parents[3]
HELDOUT = "heldout_loss"


def committed(suite: str) -> pd.DataFrame:
    return read_runs_csv(REPO / "docs" / "results" / suite / "runs.csv")


def suite_claims(suite: str) -> list:
    return list(load_suite(REPO / "experiments" / "suites" / f"{suite}.yaml").claims)


# The second table of STATISTICS.md ("Best LR chosen without the winner's curse"), verbatim.
LEAVE_ONE_SEED_OUT = """
| post − post-nowarmup | in-sample | 0.164, 0.139, 0.241, 0.214, 0.218 | +0.195 | [+0.143, +0.248] | 1e-3, 2e-3 for every seed |
| post − post-nowarmup | leave-one-seed-out | 0.164, −0.503, 0.241, 0.214, 0.218 | +0.067 | [−0.330, +0.464] | seed 1: 1e-3, 4e-3 |
| post-warmup100 − post | in-sample | −0.231, −0.293, −0.230, −0.237, −0.286 | −0.256 | [−0.294, −0.217] | 2e-3, 1e-3 |
| post-warmup100 − post | leave-one-seed-out | −0.231, −0.293, −0.230, −0.237, +0.502 | −0.098 | [−0.516, +0.320] | seed 4: 4e-3, 1e-3 |
"""


def _leave_one_seed_out_rows():
    for line in LEAVE_ONE_SEED_OUT.strip().splitlines():
        pair, choice, differences, mean, interval, _ = [cell.strip() for cell in line.strip("| ").split("|")]
        yield pytest.param(pair, choice, differences, mean, interval, id=f"{pair} {choice}")


@pytest.mark.parametrize("pair, choice, differences, mean, interval", list(_leave_one_seed_out_rows()))
def test_leave_one_seed_out_known_answers(pair, choice, differences, mean, interval):
    from andrea_lab.experiments.compare.stats import compare_variants

    a, b = [name.strip() for name in pair.split("−")]
    comparison = compare_variants(committed("norm_placement"), b, HELDOUT)[a]
    found = comparison.at_best if choice == "in-sample" else comparison.cross_fitted
    number = lambda text: float(text.strip().replace("−", "-"))  # noqa: E731
    assert found.differences == pytest.approx([number(d) for d in differences.split(",")], abs=5e-4)
    assert found.mean == pytest.approx(number(mean), abs=5e-4)
    low, high = interval.strip("[]").split(",")
    assert (found.low, found.high) == pytest.approx((number(low), number(high)), abs=5e-4)


def test_the_winners_curse_turns_two_verdicts_on_the_committed_runs():
    results = {
        r.claim.label: r for r in evaluate_claims(suite_claims("norm_placement"), committed("norm_placement"), HELDOUT)
    }
    cursed = results["lower_loss: post vs post-nowarmup"]
    assert cursed.outcome == "not detected" and cursed.in_sample.startswith(
        "+0.195 [+0.143, +0.248], n=5 at 1e-3 / 2e-3"
    )
    assert "post-nowarmup 2e-3 (seed 1: 4e-3)" in cursed.evidence
    assert results["lower_loss: post-warmup100 vs post"].outcome == "not detected"
    assert results["lower_loss: pre vs post"].outcome == "reproduced"


def _runs(losses: dict[str, dict[float, list[float]]], diverged=(), init: float = 5.0) -> pd.DataFrame:
    """``losses[variant][lr][seed]``; ``diverged`` holds (variant, lr, seed) triples."""
    return pd.DataFrame(
        [
            dict(
                variant=variant,
                lr=lr,
                seed=seed,
                initial_val_loss=init,
                final_val_loss=loss,
                status="diverged" if (variant, lr, seed) in diverged else "finished",
                divergence_kind="stuck_at_unigram" if (variant, lr, seed) in diverged else None,
            )
            for variant, by_lr in losses.items()
            for lr, by_seed in by_lr.items()
            for seed, loss in enumerate(by_seed)
        ]
    )


LOW, HIGH = 1e-3, 4e-3


def cliff_runs() -> pd.DataFrame:
    """A sits at a divergence cliff: at 4e-3 it trains to 2.30 on four seeds and sticks (capped at 5.0) on
    seed 4; at 1e-3 it is 0.10 worse than B on every seed. In-sample, 4e-3's mean (2.84) loses to 1e-3's, so
    every seed is judged at 1e-3: a tight "worse". Held out, seed 4's LR is chosen on seeds 0–3, where 4e-3
    wins: seed 4 lands on its cliff."""
    base = [2.50, 2.55, 2.45, 2.52, 2.48]
    return _runs(
        {
            "a": {LOW: [x + 0.10 + 0.002 * i for i, x in enumerate(base)], HIGH: [2.30, 2.31, 2.29, 2.30, 9.0]},
            "b": {LOW: base, HIGH: [x + 0.2 for x in base]},
        },
        diverged={("a", HIGH, 4)},
    )


def test_in_sample_excludes_zero_where_the_cross_fitted_interval_does_not():
    result = evaluate_claim(Claim("lower_loss", "a", "b"), cliff_runs())
    assert result.in_sample.startswith("+0.104 [+0.100, +0.108], n=5 at 1e-3 / 1e-3"), result.in_sample
    assert result.p_in_sample < 1e-4, "in-sample: decisively worse"
    # Two LRs bracket nothing: the claim is not judged (optimum_edges), and its p would not have decided it.
    assert result.outcome.startswith("not judged: a's optimum at the grid's lowest LR (1e-3)"), result.outcome
    assert "a 1e-3 (seed 4: 4e-3)" in result.evidence and result.p > 0.05
    assert result.evidence.startswith("a − b = +0.586 [−0.756, +1.929], n=5")


def test_the_loss_of_the_runs_that_trained_leaves_the_stuck_run_out():
    result = evaluate_claim(Claim("lower_loss_trained", "a", "b", lrs=(HIGH, LOW)), cliff_runs())
    assert result.evidence.startswith("a − b = −0.205 [−0.259, −0.151]")
    assert "n=4 at LRs a 4e-3, b 1e-3 (fixed in advance); 1 of 5 pairs left out (a run diverged)" in result.evidence
    assert result.outcome == "reproduced" and result.in_sample == ""
    capped = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(HIGH, LOW)), cliff_runs())
    assert capped.outcome == "not detected", "the capped mean carries seed 4's 5.0"


def test_claims_at_a_fixed_lr_select_nothing():
    runs = cliff_runs()
    at_high = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(HIGH, HIGH)), runs)
    assert at_high.evidence.startswith("a − b = ") and "at LR 4e-3 (fixed in advance)" in at_high.evidence
    divergences = evaluate_claim(Claim("fewer_divergences", "b", "a", lrs=(HIGH, HIGH)), runs)
    assert divergences.evidence == (
        "failed (stuck, regressed or blew up) b 0/5, a 1/5 paired by seed; discordant pairs 1 (b only 0, a only 1); "
        "exact McNemar, at LR 4e-3 (fixed in advance); failures: b none; a stuck 1"
    )
    missing = evaluate_claim(Claim("lower_loss", "a", "b", lrs=(8e-3, 8e-3)), runs)
    assert missing.outcome == "not detected" and "n=0" in missing.evidence  # no runs at that LR


def test_a_list_of_lrs_is_one_claim_per_lr():
    claims = parse_claims([{"lower_loss": ["a", "b"], "lr": [LOW, HIGH], "text": "t"}])
    assert [(c.lrs, c.text) for c in claims] == [((LOW, LOW), "t"), ((HIGH, HIGH), "t")]


def test_holm_adjusts_the_family_and_exploratory_claims_stay_out():
    runs = cliff_runs()
    raw = [
        {"lower_loss": ["b", "a"], "lr": LOW},
        {"lower_loss": ["b", "a"], "lr": HIGH},
        {"fewer_divergences": ["b", "a"]},
        {"lower_loss": ["b", "a"], "lr": LOW, "exploratory": True},
    ]
    results = evaluate_claims(raw, runs, "final_val_loss")
    family = [r.p for r in results[:3]]
    assert [r.p_adjusted for r in results[:3]] == pytest.approx(holm(family))
    assert results[3].p_adjusted is None and results[3].p == results[0].p
    assert results[0].outcome == results[3].outcome == "reproduced"  # b 0.104 lower at 1e-3 on every seed
    assert results[2].outcome == "not detected" and results[2].p_adjusted == pytest.approx(1.0)


def test_holm_over_the_december_claims_removes_two_verdicts():
    """STATISTICS.md: Holm over the 11 claims of the December reruns (norm_placement and activation, the
    in-sample method they were published with) removes post-nowarmup's divergences and pre's LR
    sensitivity, and nothing else."""
    found = [
        r
        for suite in ("norm_placement", "activation")
        for r in evaluate_claims(suite_claims(suite), committed(suite), HELDOUT)
    ]
    assert len(found) == 11
    adjusted = holm([r.p_in_sample for r in found])
    removed = [r.claim.label for r, p in zip(found, adjusted) if r.p_in_sample < 0.05 <= p]
    assert removed == ["fewer_divergences: post vs post-nowarmup", "lower_sensitivity: pre vs pre-nowarmup"]


def test_a_claim_between_runs_of_different_precision_or_machine_is_refused_unless_declared():
    runs = cliff_runs()
    runs["precision"] = ["bf16-mixed" if v == "a" else "32-true" for v in runs["variant"]]
    runs["machine"] = "Xeon +bf16"
    claim = {"lower_loss": ["a", "b"], "lr": LOW}
    with pytest.raises(ValueError, match=r"its runs differ in precision \(a: bf16-mixed; b: 32-true\).*across"):
        evaluate_claims([claim], runs)
    (declared,) = evaluate_claims([{**claim, "across": ["precision"]}], runs)
    assert declared.claim.across == ("precision",)
    runs.loc[runs.index[0], "machine"] = "EPYC"  # one run on another machine, even within a variant
    with pytest.raises(ValueError, match="differ in machine"):
        evaluate_claims([{**claim, "across": ["precision"]}], runs)
    with pytest.raises(ValueError, match="across must be a list of precision, machine"):
        parse_claims([{**claim, "across": ["seed"]}])
    with pytest.raises(
        ValueError, match=r"across must be a list of precision, machine.*got \['precision', \{'x': 1\}\]"
    ):
        parse_claims([{**claim, "across": ["precision", {"x": 1}]}])  # was a TypeError: unhashable type: 'dict'
    older = cliff_runs()  # runs that recorded neither are not held against a claim
    older["precision"] = None
    assert evaluate_claims([claim], older)


def test_a_claim_between_variants_tuned_with_different_budgets_is_refused_unless_declared():
    """Muon at its own grid of 3 LRs against AdamW at 1 would favour Muon by its tuning, not its update."""
    base = [2.50, 2.55, 2.45, 2.52, 2.48]
    runs = _runs(
        {"muon": {1e-2: [x - 0.05 for x in base], 2e-2: [x - 0.08 for x in base], 4e-2: base}, "adamw": {LOW: base}}
    )
    claim = {"lower_loss": ["muon", "adamw"]}
    with pytest.raises(ValueError, match=r"different budgets \(LRs per seed: muon: 3 \(1e-2, 2e-2, 4e-2\); adamw: 1"):
        evaluate_claims([claim], runs)
    (declared,) = evaluate_claims([{**claim, "unequal_budgets": True}], runs)
    assert declared.claim.unequal_budgets and declared.outcome == "reproduced"
    fixed = {"lower_loss": ["muon", "adamw"], "lr": {"muon": 2e-2, "adamw": LOW}}
    assert evaluate_claims([fixed], runs)[0].outcome == "reproduced"  # fixed in advance: nothing tuned
    for over_the_grid in ("lower_sensitivity", "fewer_divergences"):
        with pytest.raises(ValueError, match="measured over the LR grid, and the two variants ran different grids"):
            evaluate_claims([{over_the_grid: ["muon", "adamw"], "unequal_budgets": True}], runs)
    from andrea_lab.experiments.compare import stats

    assert stats.compare_variants(runs, "adamw", "final_val_loss")["muon"].sensitivity.n == 0  # n/a, not 0 ± 0
    with pytest.raises(ValueError, match="unequal_budgets must be true or false"):
        parse_claims([{**claim, "unequal_budgets": "yes"}])


def test_a_claim_and_its_mirror_image_are_one_hypothesis_the_aa_known_answer():
    """The A/A suite writes lower_loss b vs a and a vs b: one two-sided test. Merged, the family holds the
    three distinct hypotheses and the loss claim's Holm p is 0.041 (issue 36's known answer), where the
    duplicated family of four gave 0.0547."""
    raw = [dict(claim) for claim in load_suite(REPO / "experiments" / "suites" / "aa.yaml").claims]
    parsed = parse_claims(raw)
    assert [c.label for c in parsed] == ["lower_loss: b vs a", "lower_sensitivity: b vs a", "fewer_divergences: b vs a"]
    assert parsed[0].mirrors == ("lower_loss: a vs b",)
    results = evaluate_claims(raw, committed("aa"), HELDOUT)
    assert results[0].p_adjusted == pytest.approx(0.041, abs=5e-4) and results[0].outcome == "contradicted"
    assert "also written as lower_loss: a vs b: one two-sided test, counted once" in results[0].evidence
    assert holm([r.p for r in results]) == pytest.approx([r.p_adjusted for r in results])
    # Not a mirror: another LR, or one exploratory and one not, are different hypotheses.
    assert len(parse_claims([{"lower_loss": ["a", "b"], "lr": LOW}, {"lower_loss": ["b", "a"], "lr": HIGH}])) == 2
    assert len(parse_claims([{"lower_loss": ["a", "b"]}, {"lower_loss": ["b", "a"], "exploratory": True}])) == 2
    mirrored_lrs = [
        {"lower_loss": ["a", "b"], "lr": {"a": LOW, "b": HIGH}},
        {"lower_loss": ["b", "a"], "lr": {"a": LOW, "b": HIGH}},
    ]
    assert len(parse_claims(mirrored_lrs)) == 1


def test_the_exact_sign_flip_p_and_its_floor_say_when_seeds_are_too_few():
    from andrea_lab.experiments.compare.claims import format_exact
    from andrea_lab.experiments.compare.stats import sign_flip_p

    assert sign_flip_p([0.1, 0.2, 0.15, 0.12, 0.3]) == (0.0625, 0.0625)  # 5 seeds, all one side: the floor
    assert sign_flip_p([0.1, -0.2, 0.15]) == (1.0, 0.25)
    p, floor = sign_flip_p([0.3, 0.1, 0.2, 0.4, 0.2, 0.1, -0.05, 0.3])
    assert floor == 2 / 256 and p == pytest.approx(4 / 256)  # the flips of 0.05 only, and their mirrors
    (five_seeds,) = evaluate_claims([{"lower_loss": ["b", "a"], "lr": LOW}], cliff_runs(), "final_val_loss")
    assert five_seeds.outcome == "reproduced" and five_seeds.p < 1e-4  # the t-test: decisive
    assert format_exact(five_seeds) == "0.0625 (floor 0.0625: too few seeds to reach 0.05)"


def test_the_lr_ceiling_claim_pairs_each_seeds_highest_lr_without_a_divergence():
    """Over a grid 2x apart, A diverges only at the top LR on seeds 0-5; B from the third LR on every seed, and
    on seed 0 already at the lowest (one octave below the grid). A's ceiling is higher on every seed."""
    lrs = [1e-2, 2e-2, 4e-2, 8e-2]
    seeds = range(6)
    losses = {name: {lr: [2.5] * len(seeds) for lr in lrs} for name in ("a", "b")}
    diverged = {("a", 8e-2, s) for s in seeds} | {("b", lr, s) for s in seeds for lr in lrs[2:]} | {("b", 1e-2, 0)}
    result = evaluate_claim(Claim("higher_ceiling", "a", "b"), _runs(losses, diverged))
    # per seed: a at log2(4e-2), b at log2(2e-2) (seeds 1-5) or log2(1e-2) - 1 (seed 0): +1 x5, +3 x1 octaves
    assert result.outcome == "reproduced" and result.p == pytest.approx(2 / 2**6)
    assert result.evidence.startswith("a − b = +1.33 [") and "n=6" in result.evidence
    assert evaluate_claim(Claim("higher_ceiling", "b", "a"), _runs(losses, diverged)).outcome == "contradicted"
    none = evaluate_claim(Claim("higher_ceiling", "a", "b"), _runs(losses))
    assert none.outcome == "not detected" and none.evidence.startswith("a − b = +0.00")
    assert claims_module.IDENTICAL not in none.evidence, "equal ceilings are octaves of one grid, not one computation"


def test_the_lr_ceiling_claim_takes_no_lr_and_needs_one_grid():
    with pytest.raises(ValueError, match="higher_ceiling is measured over the whole LR grid"):
        parse_claims([{"higher_ceiling": ["a", "b"], "lr": 1e-2}])
    runs = _runs({"a": {1e-2: [2.5] * 3, 2e-2: [2.5] * 3}, "b": {1e-2: [2.5] * 3, 4e-2: [2.5] * 3}})
    with pytest.raises(ValueError, match="ran different grids"):
        evaluate_claim(Claim("higher_ceiling", "a", "b"), runs)


def test_equivalence_within_a_declared_margin_by_two_one_sided_tests():
    """A − B per seed at 1e-3 (fixed): +0.004, −0.003, +0.002, −0.001, +0.003, 0.000. Mean +0.0008, sd 0.0027:
    the 90 % interval [−0.0014, +0.0031] lies inside ±0.01 (equivalent), not inside ±0.002."""
    shifts = [0.004, -0.003, 0.002, -0.001, 0.003, 0.0]
    base = [2.50, 2.55, 2.45, 2.52, 2.48, 2.51]
    runs = _runs({"a": {LOW: [b + s for b, s in zip(base, shifts)]}, "b": {LOW: base}})
    wide = evaluate_claim(Claim("equivalent_loss", "a", "b", lrs=(LOW, LOW), margin=0.01), runs)
    assert wide.outcome == "reproduced" and wide.p < 0.001
    assert wide.evidence.startswith("a − b = +0.001, 90 % interval [−0.001, +0.003], n=6, against the margin ±0.01")
    assert math.isnan(wide.p_exact), "the sign-flip test is of a mean of 0, not of a margin"
    narrow = evaluate_claim(Claim("equivalent_loss", "a", "b", lrs=(LOW, LOW), margin=0.002), runs)
    assert narrow.outcome == "not detected" and narrow.p > 0.05
    far = _runs({"a": {LOW: [b + 0.05 for b in base]}, "b": {LOW: base}})
    assert evaluate_claim(Claim("equivalent_loss", "a", "b", lrs=(LOW, LOW), margin=0.01), far).outcome == (
        "not detected"
    ), "a clear difference is not equivalence (and is no verdict of this claim either)"


def test_pairs_equal_to_the_bit_are_said_to_be_an_identity_not_a_measurement():
    """Two parametrisations of one update tuned to the same point run the same computation: their interval is
    [0, 0] and TOST's p is 0, which describe no noise; the evidence says so. One pair that differs: not said."""
    base = [2.50, 2.55, 2.45, 2.52, 2.48, 2.51]
    same = _runs({"a": {LOW: list(base)}, "b": {LOW: list(base)}})
    for kind, margin in (("equivalent_loss", 0.03), ("lower_loss", None)):
        judged = evaluate_claim(Claim(kind, "a", "b", lrs=(LOW, LOW), margin=margin), same)
        assert judged.evidence.endswith(f"({claims_module.IDENTICAL})"), judged.evidence
    nearly = _runs({"a": {LOW: [*base[:-1], base[-1] + 1e-4]}, "b": {LOW: list(base)}})
    judged = evaluate_claim(Claim("equivalent_loss", "a", "b", lrs=(LOW, LOW), margin=0.03), nearly)
    assert claims_module.IDENTICAL not in judged.evidence


def test_an_equivalence_claim_needs_its_margin_and_others_take_none():
    with pytest.raises(ValueError, match="equivalent_loss needs margin: a positive number of nats"):
        parse_claims([{"equivalent_loss": ["a", "b"]}])
    with pytest.raises(ValueError, match="equivalent_loss needs margin"):
        parse_claims([{"equivalent_loss": ["a", "b"], "margin": -0.01}])
    with pytest.raises(ValueError, match="margin is for equivalent_loss claims, not lower_loss"):
        parse_claims([{"lower_loss": ["a", "b"], "margin": 0.01}])
    merged = parse_claims(
        [{"equivalent_loss": ["a", "b"], "margin": 0.02}, {"equivalent_loss": ["b", "a"], "margin": 0.02}]
    )
    assert len(merged) == 1 and merged[0].label == "equivalent_loss: a vs b within ±0.02"
