"""A suite's search: declarations: the suite's keys merged with a variant's own, the judged seeds the suite's,
and each bad declaration one line naming the suite and the value, when the suite loads (before any run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from andrea_lab.experiments.sweep.suite import SuiteError, load_suite


def write(tmp_path: Path, search=None, variants=None, **extra) -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    document = {
        "name": "tuned",
        "base": "base.yaml",
        "lrs": [1.0e-3],
        "seeds": [100, 101, 102],
        "search": search
        if search is not None
        else {
            "keys": {"model.lr": [1.0e-3, 2.0e-3, 4.0e-3], "model.weight_decay": [0.05, 0.1, 0.2]},
            "base": {"model.lr": 2.0e-3, "model.weight_decay": 0.1},
            "budget": 6,
            "tuning_seeds": [900, 901],
        },
        "variants": variants or [{"name": "adamw"}],
        **extra,
    }
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_variants_own_keys_join_the_suites_and_the_suites_seeds_are_judged(tmp_path):
    own = {
        "keys": {"model.muon_momentum": [0.9, 0.95]},
        "base": {"model.muon_momentum": 0.95},
        "upper_bounds": {"model.muon_momentum": 1.0},
    }
    suite = load_suite(write(tmp_path, variants=[{"name": "adamw"}, {"name": "muon", "search": own}]))
    assert set(suite.searches["adamw"].keys) == {"model.lr", "model.weight_decay"}
    assert set(suite.searches["muon"].keys) == {"model.lr", "model.weight_decay", "model.muon_momentum"}
    assert suite.searches["muon"].base["model.muon_momentum"] == 0.95
    assert suite.searches["muon"].upper_bounds == {"model.muon_momentum": 1.0}
    assert suite.searches["adamw"].upper_bounds == {}
    assert suite.searches["muon"].judged_seeds == (100, 101, 102) and suite.searches["muon"].budget == 6
    assert suite.unequal_budgets_ok is False


def test_a_suite_without_search_has_none(tmp_path):
    path = write(tmp_path)
    document = yaml.safe_load(path.read_text())
    del document["search"]
    path.write_text(yaml.safe_dump(document))
    assert load_suite(path).searches == {}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"search": {"keys": {}, "budget": 2, "tuning_seeds": [900]}}, "empty search space"),
        (
            {"search": {"keys": {"model.lr": [1.0e-3]}, "base": {"model.lr": 1.0e-3}, "tuning_seeds": [900]}},
            "unbounded",
        ),
        (
            {"search": {"keys": {"model.lr": [1e-3]}, "base": {"model.lr": 1e-3}, "budget": 2, "tuning_seeds": [100]}},
            r"seeds \[100\] are both tuning and judged",
        ),
        (
            {
                "search": {
                    "keys": {"seed_everything": [1, 2]},
                    "base": {"seed_everything": 1},
                    "budget": 2,
                    "tuning_seeds": [900],
                }
            },
            "unknown key 'seed_everything'",
        ),
        (
            {"search": {"keys": {"model.lr": [1e-3]}, "budget": 2, "tuning_seeds": [900], "steps": 3}},
            "unknown key 'steps'",
        ),
        (
            {
                "search": {
                    "keys": {"model.weight_decay": [0.1, 0.2]},
                    "base": {"model.weight_decay": 0.1},
                    "budget": 2,
                    "tuning_seeds": [900],
                },
                "lrs": [1e-3, 2e-3],
            },
            "searches without model.lr and has 2 lrs",
        ),
        (
            {
                "search": {
                    "keys": {"model.beta2": [0.95], "optimizer.beta2": [0.95]},
                    "base": {"model.beta2": 0.95, "optimizer.beta2": 0.95},
                    "budget": 2,
                    "tuning_seeds": [900],
                }
            },
            "share the name 'beta2'",
        ),
        ({"unequal_budgets_ok": "yes"}, "unequal_budgets_ok must be true or false"),
    ],
)
def test_bad_declarations_are_one_line_before_any_run(tmp_path, change, message):
    path = write(tmp_path, **{k: v for k, v in change.items() if k != "lrs"})
    if "lrs" in change:
        document = yaml.safe_load(path.read_text())
        document["lrs"] = change["lrs"]
        path.write_text(yaml.safe_dump(document))
    with pytest.raises(SuiteError, match=message) as error:
        load_suite(path)
    assert "\n" not in str(error.value) and "tuned.yaml" in str(error.value)


def test_a_search_may_extend_an_edge_by_extend_grids_rules(tmp_path):
    search = {
        "keys": {"model.lr": [1.0e-3, 2.0e-3]},
        "base": {"model.lr": 1.0e-3},
        "budget": 4,
        "tuning_seeds": [900],
        "max_extensions": 2,
        "factor": 4,
    }
    found = load_suite(write(tmp_path, search=search)).searches["adamw"]
    assert (found.max_extensions, found.factor) == (2, 4.0)
    with pytest.raises(SuiteError, match="max_extensions 9 is not a whole number from 0 to 6") as error:
        load_suite(write(tmp_path, search={**search, "max_extensions": 9}))
    assert "\n" not in str(error.value)
