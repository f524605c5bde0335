"""andrea_lab/experiments/sweep/tiny_suite.py: the one tiny suite that the TensorBoard report test checks and the
screenshot
script photographs (the script imports it, never the tests)."""

from __future__ import annotations

import ast
from pathlib import Path

from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.experiments.sweep.tiny_suite import MICRO, NAME, write_tiny_suite

REPO = Path(__file__).resolve().parents[3]


def test_the_tiny_suite_plans_two_variants_by_two_lrs_of_the_micro_model(tmp_path):
    suite = load_suite(write_tiny_suite(tmp_path / "tiny.yaml", REPO / "experiments" / "cpu-base.yaml", tmp_path))
    specs = plan_sweep(suite, tmp_path / "runs")
    assert suite.name == NAME and [(s.variant, s.lr) for s in specs] == [
        ("pre", 1e-3),
        ("post-nowarmup", 1e-3),
        ("pre", 3.0),
        ("post-nowarmup", 3.0),
    ]
    assert all(s.overrides["model.config.d_model"] == MICRO["model.config.d_model"] for s in specs)
    assert specs[1].overrides["model.warmup_steps"] == 0 and specs[0].overrides["data.corpus"] == str(tmp_path)


def test_its_two_users_share_it_and_the_script_imports_no_test_module():
    for user in ("scripts/tensorboard_screenshots.py", "tests/experiments/compare/test_tensorboard_report.py"):
        tree = ast.parse((REPO / user).read_text())
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert "andrea_lab.experiments.sweep.tiny_suite" in modules, user
        assert "MICRO" not in {
            t.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }, f"{user} keeps its own copy"
        if user.startswith("scripts/"):
            assert not any(m and (m == "tests" or m.startswith(("tests.", "andrea_testing"))) for m in modules)
