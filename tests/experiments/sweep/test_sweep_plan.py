"""Planning: every combination once, in run order, with stable self-describing directories and commands;
run states (what counts as finished) and moving unfinished directories aside."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite
from andrea_lab.runs.directory import (
    DONE_MARKER,
    FAILED_MARKER,
    START_MARKER,
    SUMMARY_FILE,
    is_aside,
    move_aside,
    run_state,
)


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "base.yaml").write_text("model: {}\n")
    (tmp_path / "np.yaml").write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "common": {"trainer.max_steps": 10, "stability.stuck_after": 0},  # one stuck window for all warmups
                "lrs": [1.0e-3, 1.0e-2],
                "seeds": [0, 1],
                "variants": [
                    {"name": "pre", "overrides": {"model.config.norm_placement": "pre"}},
                    {"name": "post", "overrides": {"model.config.norm_placement": "post", "model.warmup_steps": 0}},
                    {"name": "pre-nowarmup", "overrides": {"model.warmup_steps": 0}},
                ],
            },
            sort_keys=False,
        )
    )
    return load_suite(tmp_path / "np.yaml")


def option(command, key):
    """The value following --key (the last one, as the CLI reads it)."""
    values = [command[i + 1] for i, arg in enumerate(command) if arg == f"--{key}"]
    assert values, f"--{key} not in {command}"
    return values[-1]


def test_every_combination_once_seeds_outermost(suite, tmp_path):
    specs = plan_sweep(suite, tmp_path / "runs")
    assert len(specs) == 3 * 2 * 2
    assert len({(s.variant, s.lr, s.seed) for s in specs}) == 12
    assert [s.index for s in specs] == list(range(1, 13)) and {s.total for s in specs} == {12}
    # The first 6 runs are a complete single-seed comparison of every variant at every LR.
    assert {s.seed for s in specs[:6]} == {0} and {(s.variant, s.lr) for s in specs[:6]} == {
        (v, lr) for v in ("pre", "post", "pre-nowarmup") for lr in (1e-3, 1e-2)
    }
    assert [s.variant for s in specs[:3]] == ["pre", "post", "pre-nowarmup"]
    assert specs[0].label == "pre lr=1e-3 seed=0"
    assert specs[4].counter == "[ 5/12]"


def test_directories_are_stable_and_self_describing(suite, tmp_path):
    specs = plan_sweep(suite, tmp_path / "runs")
    spec = next(s for s in specs if s.variant == "post" and s.lr == 1e-2 and s.seed == 1)
    assert spec.run_dir == (tmp_path / "runs" / "np" / "post" / "lr1e-2-seed1").resolve()
    assert [s.run_dir for s in plan_sweep(suite, tmp_path / "runs")] == [s.run_dir for s in specs]
    assert len({s.run_dir for s in specs}) == len(specs)


def test_the_command_sets_lr_seeds_and_directory_after_the_overrides(suite, tmp_path):
    spec = next(
        s
        for s in plan_sweep(suite, tmp_path / "runs", python="PY")
        if s.variant == "post" and s.seed == 1 and s.lr == 1e-3
    )
    command = list(spec.command)
    assert command[:7] == ["PY", "-P", "-m", "andrea_lab.cli", "fit", "--config", str(suite.base)]
    assert option(command, "model.config.norm_placement") == "post"
    assert option(command, "model.warmup_steps") == "0"
    assert option(command, "trainer.max_steps") == "10"
    assert float(option(command, "model.lr")) == 1e-3
    assert option(command, "seed_everything") == "1" and option(command, "data.seed") == "1"
    assert option(command, "trainer.logger.init_args.save_dir") == str((tmp_path / "runs" / "np").resolve())
    assert option(command, "trainer.logger.init_args.name") == "post"
    assert option(command, "trainer.logger.init_args.version") == "lr1e-3-seed1"
    assert option(command, "summary.suite") == "np" and option(command, "summary.variant") == "post"  # hparams
    # common first, then the variant, then what the sweep owns
    assert (
        command.index("--trainer.max_steps")
        < command.index("--model.config.norm_placement")
        < command.index("--model.lr")
    )
    assert spec.overrides == {
        "trainer.max_steps": 10,
        "stability.stuck_after": 0,
        "model.config.norm_placement": "post",
        "model.warmup_steps": 0,
    }


def test_same_seed_means_same_data_seed_across_variants(suite, tmp_path):
    specs = plan_sweep(suite, tmp_path / "runs")
    for seed in (0, 1):
        assert {option(list(s.command), "data.seed") for s in specs if s.seed == seed} == {str(seed)}


def test_grids_and_variants_can_be_replaced(suite, tmp_path):
    specs = plan_sweep(suite, tmp_path / "runs", lrs=[3e-3], seeds=[5], variants=["post"])
    assert [(s.variant, s.lr, s.seed) for s in specs] == [("post", 3e-3, 5)]
    assert specs[0].run_dir.name == "lr3e-3-seed5"
    with pytest.raises(SuiteError, match="no variant named 'sandwich'; variants: pre, post, pre-nowarmup"):
        plan_sweep(suite, tmp_path / "runs", variants=["sandwich"])


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "files, state",
    [
        ({}, "interrupted"),
        ({START_MARKER: {}}, "interrupted"),
        ({START_MARKER: {}, SUMMARY_FILE: {"status": "finished"}}, "finished"),
        ({SUMMARY_FILE: {"status": "diverged"}}, "diverged"),
        ({SUMMARY_FILE: {"status": "interrupted"}}, "interrupted"),
        ({SUMMARY_FILE: {"status": "interrupted"}, DONE_MARKER: {"status": "finished"}}, "interrupted"),
        ({START_MARKER: {}, DONE_MARKER: {"status": "finished"}}, "finished"),
        ({DONE_MARKER: {"status": "diverged"}}, "diverged"),
        ({START_MARKER: {}, FAILED_MARKER: {"returncode": 1}}, "failed"),
    ],
)
def test_run_state(tmp_path, files, state):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name, data in files.items():
        _write(run_dir / name, data)
    assert run_state(run_dir) == state


def test_run_state_of_a_missing_directory_is_new(tmp_path):
    assert run_state(tmp_path / "absent") == "new"


def test_move_aside_renames_and_never_deletes(tmp_path):
    run_dir = tmp_path / "lr1e-3-seed0"
    _write(run_dir / START_MARKER, {"x": 1})
    first = move_aside(run_dir, "interrupted")
    assert not run_dir.exists() and first.name.startswith("lr1e-3-seed0.interrupted-")
    assert json.loads((first / START_MARKER).read_text()) == {"x": 1}
    _write(run_dir / START_MARKER, {"x": 2})
    second = move_aside(run_dir, "interrupted")  # same second: a distinct name, the first one kept
    assert second != first and first.exists() and second.exists()
    assert is_aside(first) and is_aside(second) and not is_aside(run_dir)


def test_plan_uses_this_python_by_default(suite, tmp_path):
    assert plan_sweep(suite, tmp_path)[0].command[0] == sys.executable


def test_a_seed_offset_changes_the_seeds_a_variant_trains_with_not_its_directory(tmp_path):
    """A/A suites: ``seed_offset`` reseeds init and data; the run is still filed (and paired) by its seed."""
    (tmp_path / "base.yaml").write_text("model: {}\n")
    (tmp_path / "aa.yaml").write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "lrs": [1e-3],
                "seeds": [0, 1],
                "variants": [{"name": "a"}, {"name": "b", "seed_offset": 1000}],
            }
        )
    )
    specs = plan_sweep(load_suite(tmp_path / "aa.yaml"), tmp_path / "runs")
    b_seed1 = next(s for s in specs if s.variant == "b" and s.seed == 1)
    command = list(b_seed1.command)
    assert command[command.index("--seed_everything") + 1] == "1001"
    assert command[command.index("--data.seed") + 1] == "1001"
    assert b_seed1.run_dir.name == "lr1e-3-seed1"
    assert command[command.index("--trainer.logger.init_args.version") + 1] == "lr1e-3-seed1"
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump(
            {"base": "base.yaml", "lrs": [1e-3], "seeds": [0], "variants": [{"name": "a", "seed_offset": -1}]}
        )
    )
    with pytest.raises(SuiteError, match="seed_offset must be a non-negative integer, got -1"):
        load_suite(tmp_path / "bad.yaml")


def _own_grid_suite(tmp_path: Path, claims: list | None = None, muon_lrs=(1e-2, 3e-2)) -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    document = {
        "base": "base.yaml",
        "lrs": [1e-3, 3e-3],
        "seeds": [0, 1],
        "variants": [{"name": "adamw"}, {"name": "muon", "lrs": list(muon_lrs)}],
    }
    if claims is not None:
        document["claims"] = claims
    (tmp_path / "opt.yaml").write_text(yaml.safe_dump(document))
    return tmp_path / "opt.yaml"


def test_a_variant_with_its_own_grid_runs_only_its_lrs(tmp_path):
    """An optimizer whose optimum lies a decade away tunes over a grid around it; --lrs replaces every grid."""
    suite = load_suite(_own_grid_suite(tmp_path))
    specs = plan_sweep(suite, tmp_path / "runs")
    assert {(s.variant, s.lr) for s in specs} == {("adamw", 1e-3), ("adamw", 3e-3), ("muon", 1e-2), ("muon", 3e-2)}
    assert len(specs) == 8 and [s.index for s in specs] == list(range(1, 9))
    assert {s.seed for s in specs[:4]} == {0}  # seeds still outermost: the first seed is a whole comparison
    assert {(s.variant, s.lr) for s in plan_sweep(suite, tmp_path / "runs", lrs=[5e-3])} == {
        ("adamw", 5e-3),
        ("muon", 5e-3),
    }


def test_a_variants_own_grid_is_checked_and_claims_fix_lrs_from_it(tmp_path):
    with pytest.raises(SuiteError, match="variant 'muon'.*lrs lists 0.01 twice"):
        load_suite(_own_grid_suite(tmp_path, muon_lrs=(1e-2, 0.01)))
    with pytest.raises(SuiteError, match="variant 'muon'.*learning rate -1 must be a finite number > 0"):
        load_suite(_own_grid_suite(tmp_path, muon_lrs=(-1,)))
    good = [{"lower_loss": ["muon", "adamw"], "lr": {"muon": 3e-2, "adamw": 1e-3}}]
    assert load_suite(_own_grid_suite(tmp_path, claims=good)).claims
    bad = [{"lower_loss": ["muon", "adamw"], "lr": 1e-3}]
    with pytest.raises(SuiteError, match=r"lr 1e-3 is not in muon's lrs \(1e-2, 3e-2\)"):
        load_suite(_own_grid_suite(tmp_path, claims=bad))


def test_the_sweep_header_names_each_variants_own_grid(tmp_path, capsys):
    from andrea_lab.commands.sweep import print_header

    suite = load_suite(_own_grid_suite(tmp_path))
    print_header(suite, plan_sweep(suite, tmp_path / "runs"), "runs/opt")
    assert capsys.readouterr().out.startswith(
        f"suite opt ({suite.path}): 2 variants at their own LRs (adamw 1e-3, 3e-3; muon 1e-2, 3e-2) x 2 seeds (0, 1)"
        " = 8 runs in runs/opt"
    )


def test_the_sweep_header_lists_each_rung_where_the_rungs_grids_differ(tmp_path, capsys):
    """The committed ladder puts its top rung on its own brackets (ladder.grids: 3 LRs a variant, 3 seeds): the
    header's union of LRs and seeds is followed by each rung's own, and its run count is what will run."""
    from andrea_lab.commands.sweep import print_header

    ladder = load_suite(Path(__file__).resolve().parents[3] / "experiments" / "suites" / "ladder.yaml")
    specs = plan_sweep(ladder, tmp_path / "runs")
    print_header(ladder, specs, "runs/ladder")
    out = capsys.readouterr().out
    assert f"= {len(specs)} runs in runs/ladder" in out
    assert "  d64: 180 runs, LRs 2e-3, 4e-3, 8e-3, 1.6e-2, seeds 600, 601, 602, 603, 604\n" in out  # 9 x 4 x 5
    top = "  d256: 81 runs, LRs 9e-5, 1.8e-4, 3.6e-4, 6e-4, 1.2e-3, 2.4e-3, 4.8e-3, 9.6e-3, seeds 600, 601, 602\n"
    assert top in out
    assert len(specs) == 3 * 180 + 81  # 9 variants x 3 LRs x 3 seeds at d256


def test_the_sweep_header_adds_no_rung_lines_where_every_rung_runs_the_same_grid(suite, tmp_path, capsys):
    from andrea_lab.commands.sweep import per_scale_lines

    assert per_scale_lines(plan_sweep(suite, tmp_path / "runs")) == []
