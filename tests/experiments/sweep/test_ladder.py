"""A suite's ladder: section: per-rung grids planned, decisions and the prediction checked, each bad input one
line (issue 54)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite

REPO = Path(__file__).resolve().parents[3]


def ladder_document() -> dict:
    return {
        "name": "lad",
        "base": str(REPO / "experiments" / "cpu-base.yaml"),
        "lrs": [1.0e-3, 3.0e-3, 1.0e-2],
        "seeds": [0, 1, 2],
        "scales": [
            {
                "name": "small",
                "overrides": {"model.config.d_model": 32, "model.config.n_head": 1, "trainer.max_steps": 10},
            },
            {
                "name": "big",
                "overrides": {"model.config.d_model": 64, "model.config.n_head": 2, "trainer.max_steps": 40},
            },
        ],
        "variants": [{"name": "gelu"}, {"name": "relu", "overrides": {"model.config.activation": "andrea-lab:relu"}}],
        "ladder": {"decisions": [["relu", "gelu"]], "grids": {"big": {"lrs": [3.0e-3, 6.0e-3], "seeds": [0, 1]}}},
    }


def write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_rung_runs_its_own_grid_and_seeds(tmp_path):
    suite = load_suite(write(tmp_path, ladder_document()))
    assert suite.ladder.decisions == (("relu", "gelu"),)
    cells = {(s.scale, s.lr, s.seed) for s in plan_sweep(suite, tmp_path / "runs")}
    assert {(lr, seed) for scale, lr, seed in cells if scale == "small"} == {
        (lr, s) for lr in (1e-3, 3e-3, 1e-2) for s in (0, 1, 2)
    }
    assert {(lr, seed) for scale, lr, seed in cells if scale == "big"} == {
        (lr, s) for lr in (3e-3, 6e-3) for s in (0, 1)
    }
    # --lrs / --seeds replace every grid, the rung's too.
    handed = {(s.scale, s.lr, s.seed) for s in plan_sweep(suite, tmp_path / "runs", lrs=[1e-2], seeds=[2])}
    assert handed == {("small", 1e-2, 2), ("big", 1e-2, 2)}


def test_a_rung_may_give_each_variant_its_own_lrs(tmp_path):
    """The top rung's bracket placed per variant (Muon's optimum sits 4x above AdamW's)."""
    document = ladder_document()
    document["ladder"]["grids"]["big"]["lrs"] = {"gelu": [2.0e-3, 4.0e-3, 8.0e-3], "relu": [1.0e-3, 2.0e-3]}
    suite = load_suite(write(tmp_path, document))
    cells = {(s.scale, s.variant, s.lr) for s in plan_sweep(suite, tmp_path / "runs")}
    assert {(v, lr) for scale, v, lr in cells if scale == "big"} == {
        ("gelu", 2e-3),
        ("gelu", 4e-3),
        ("gelu", 8e-3),
        ("relu", 1e-3),
        ("relu", 2e-3),
    }
    assert {lr for scale, v, lr in cells if scale == "small" and v == "relu"} == {1e-3, 3e-3, 1e-2}


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda d: d["ladder"]["grids"]["big"].update(lrs={"gelu": [1.0e-3]}),
            "lrs per variant lacks relu; a mapping of lrs names every variant: gelu, relu",
        ),
        (
            lambda d: d["ladder"]["grids"]["big"].update(lrs={"gelu": [1.0e-3], "relu": [1.0e-3], "swiglu": [1.0]}),
            "lrs per variant names swiglu, not variants",
        ),
        (
            lambda d: d["ladder"].update(decisions=[["relu", "swiglu"]]),
            "names 'swiglu', not a variant; variants: gelu, relu",
        ),
        (lambda d: d["ladder"].update(decisions=[["relu", "relu"]]), "compares a variant with itself"),
        (lambda d: d["ladder"].update(decisions=[["relu", "gelu"], ["gelu", "relu"]]), "or is listed twice"),
        (lambda d: d["ladder"].update(decisions="relu"), "decisions must be a non-empty list"),
        (lambda d: d["ladder"].update(grids={"huge": {"lrs": [1.0e-3]}}), "grids names rung 'huge', not a scale"),
        (lambda d: d["ladder"].update(grids={"big": {"lr": [1.0e-3]}}), "lr"),
        (lambda d: d["ladder"].update(grids={"big": {"seeds": [7]}}), "seeds [7] are not among the suite's seeds"),
        (lambda d: d["ladder"].update(decison=[]), "decison"),
        (lambda d: d["ladder"].update(grids={"big": {"lrs": [1.0e-3] * 4000}}), "12,000 LR x seed cells, more than"),
        (lambda d: d.update(scales=d["scales"][:1]), "a ladder needs at least two rungs"),
        (lambda d: d["ladder"].update(prediction={"file": "p.json", "sha256": "0" * 64}), "p.json does not exist"),
    ],
)
def test_bad_ladders_are_refused_in_one_line(tmp_path, edit, message):
    document = ladder_document()
    edit(document)
    with pytest.raises(SuiteError, match=re.escape(message)) as refused:
        load_suite(write(tmp_path, document))
    assert "\n" not in str(refused.value)


def _with_prediction(tmp_path: Path, content: dict, sha256: str | None = None) -> dict:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(content))
    document = ladder_document()
    digest = sha256 or hashlib.sha256(path.read_bytes()).hexdigest()
    document["ladder"]["prediction"] = {"file": "p.json", "sha256": digest}
    return document


def test_a_prediction_file_must_match_the_suite(tmp_path):
    good = _with_prediction(tmp_path, {"suite": "lad", "top_rung": "big"})
    assert load_suite(write(tmp_path, good)).ladder.prediction == (tmp_path / "p.json").resolve()
    with pytest.raises(SuiteError, match="has sha256 .*, not the 1111"):
        load_suite(write(tmp_path, _with_prediction(tmp_path, {"suite": "lad", "top_rung": "big"}, "1" * 64)))
    with pytest.raises(
        SuiteError, match="is for suite 'lad', top rung 'small'; this suite is 'lad' with top rung 'big'"
    ):
        load_suite(write(tmp_path, _with_prediction(tmp_path, {"suite": "lad", "top_rung": "small"})))
