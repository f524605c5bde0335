"""The suite option extend_grid: a valid one loads; a search without a ceiling, with an absurd or negative
ceiling, a factor that does not grow the grid, or a variant of one LR (no inside to find) is one line naming
the value, and ``andrea sweep`` exits 2 before any run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep.extend_grid import ExtendGrid, parse_extend_grid
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite


def write_suite(tmp_path: Path, extend_grid, variant_lrs=None) -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    variant = {"name": "a"} if variant_lrs is None else {"name": "a", "lrs": variant_lrs}
    document = {
        "name": "x",
        "base": "base.yaml",
        "lrs": [1.0e-3, 2.0e-3, 4.0e-3],
        "seeds": [0, 1],
        "variants": [variant, {"name": "b"}],
        "extend_grid": extend_grid,
    }
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_valid_option_loads_and_none_means_no_extension(tmp_path):
    assert load_suite(write_suite(tmp_path, {"max_extensions": 2, "factor": 2})).extend_grid == ExtendGrid(2, 2.0)
    assert load_suite(write_suite(tmp_path, {"max_extensions": 1})).extend_grid == ExtendGrid(1, 2.0), "factor 2"
    assert load_suite(write_suite(tmp_path, None)).extend_grid is None
    assert parse_extend_grid({"max_extensions": 0}, "s", {"a": (1e-3, 2e-3)}) == ExtendGrid(0, 2.0), "0: never"


@pytest.mark.parametrize(
    "value, named",
    [
        ({"factor": 2}, "max_extensions is required"),
        ({"max_extensions": None}, "without a ceiling the search is unbounded"),
        ({"max_extensions": -1}, "max_extensions -1 is not a whole number from 0 to 6"),
        ({"max_extensions": 1000}, "max_extensions 1000 is not a whole number from 0 to 6"),
        ({"max_extensions": 2.5}, "max_extensions 2.5"),
        ({"max_extensions": True}, "max_extensions True"),
        ({"max_extensions": 2, "factor": 1}, "factor 1 is not a number above 1"),
        ({"max_extensions": 2, "factor": 0.5}, "factor 0.5"),
        ({"max_extensions": 2, "factor": ".inf"}, "factor '.inf'"),
        ({"max_extensions": 2, "factor": 100}, "at most 10"),
        ({"max_extensions": 2, "step": 2}, "unknown key 'step'"),
        ([2, 2], "must be a mapping"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_value(tmp_path, value, named):
    with pytest.raises(SuiteError, match=None) as raised:
        load_suite(write_suite(tmp_path, value))
    message = str(raised.value)
    assert named in message and "\n" not in message and "extend_grid" in message


def test_a_variant_of_one_lr_has_no_inside_for_an_optimum(tmp_path):
    with pytest.raises(SuiteError, match=r"variant 'a' runs at one LR \(1e-3\), which has no inside"):
        load_suite(write_suite(tmp_path, {"max_extensions": 2}, variant_lrs=[1.0e-3]))


def test_the_sweep_refuses_it_before_any_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = sweep_command.main([str(write_suite(tmp_path, {"max_extensions": -1})), "--runs-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "max_extensions -1" in err
    assert not runs.exists(), "nothing was planned or written"
