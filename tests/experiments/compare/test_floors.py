"""A claim whose exact test cannot reach p < 0.05 with the suite's seeds is named before the runs: the floor
agrees with the tests the claims are judged by, and `andrea sweep` prints it."""

from __future__ import annotations

import pytest
import yaml

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.compare.claim_spec import parse_claims
from andrea_lab.experiments.compare.divergence import mcnemar_exact_p
from andrea_lab.experiments.compare.floors import smallest_p, unconfirmable_claims
from andrea_lab.experiments.compare.stats import sign_flip_p
from andrea_lab.experiments.sweep.suite import load_suite


def claim(**written):
    return parse_claims([written])[0]


@pytest.mark.parametrize("seeds", [3, 5, 6, 10])
def test_the_floor_is_what_the_judging_tests_give_in_the_most_extreme_case(seeds):
    at_one_lr = claim(fewer_divergences=["a", "b"], lr=1e-3)
    assert smallest_p(at_one_lr, seeds, shared_lrs=4) == pytest.approx(mcnemar_exact_p(0, seeds))
    over_the_grid = claim(fewer_divergences=["a", "b"])
    assert smallest_p(over_the_grid, seeds, shared_lrs=4) == pytest.approx(mcnemar_exact_p(0, 4 * seeds))
    ceiling = claim(higher_ceiling=["a", "b"])
    assert smallest_p(ceiling, seeds, shared_lrs=4) == pytest.approx(sign_flip_p([1.0] * seeds)[0])
    assert smallest_p(claim(lower_loss=["a", "b"], lr=1e-3), seeds, shared_lrs=4) is None  # a t-test: no floor


def write_suite(tmp_path, seeds, claims, lrs=(1e-3, 2e-3)):
    (tmp_path / "base.yaml").write_text("model: {}\n")
    path = tmp_path / "floors.yaml"
    document = {
        "base": "base.yaml",
        "lrs": list(lrs),
        "seeds": list(seeds),
        "variants": [{"name": "a"}, {"name": "b", "overrides": {"model.config.qk_norm": True}}],
        "claims": claims,
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_suite_names_each_claim_it_cannot_confirm_and_the_seeds_that_could(tmp_path):
    claims = [
        {"fewer_divergences": ["a", "b"], "lr": 2e-3},
        {"fewer_divergences": ["a", "b"]},  # 2 LRs x 5 seeds = 10 pairs: floor 0.002
        {"higher_ceiling": ["a", "b"]},
        {"lower_loss": ["a", "b"], "lr": 1e-3},
    ]
    lines = unconfirmable_claims(load_suite(write_suite(tmp_path, range(5), claims)))
    assert len(lines) == 2, lines
    assert lines[0].startswith("claim fewer_divergences: a vs b @ 2e-3 cannot reach p < 0.05 with 5 seeds")
    assert "smallest possible p is 0.0625" in lines[0] and lines[0].endswith("6 seeds could")
    assert lines[1].startswith("claim higher_ceiling: a vs b") and "sign-flip" in lines[1]
    assert unconfirmable_claims(load_suite(write_suite(tmp_path, range(6), claims))) == []
    # On a grid of one LR the McNemar pairs of a grid claim are the seeds too.
    lines = unconfirmable_claims(load_suite(write_suite(tmp_path, range(2), claims[:3], lrs=(2e-3,))))
    assert [line.split(" cannot")[0] for line in lines] == [
        "claim fewer_divergences: a vs b @ 2e-3",
        "claim fewer_divergences: a vs b",
        "claim higher_ceiling: a vs b",
    ]
    assert "over 1 shared LRs" in lines[1] and all(line.endswith("6 seeds could") for line in lines)


def test_andrea_sweep_warns_before_the_runs_and_still_plans_them(tmp_path, capsys):
    path = write_suite(tmp_path, range(5), [{"fewer_divergences": ["a", "b"], "lr": 2e-3}])
    code = sweep_command.main([str(path), "--runs-dir", str(tmp_path / "runs"), "--dry-run", "--no-check"])
    out, err = capsys.readouterr()
    assert code == 0 and "= 20 runs" in out
    assert "andrea sweep: warning: floors.yaml: claim fewer_divergences: a vs b @ 2e-3 cannot reach" in err
