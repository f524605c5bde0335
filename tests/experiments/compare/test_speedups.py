"""Speed-up against size (andrea_lab.experiments.compare.speedups), on constructed runs where the true bracket is
known: 2 sizes x 2 planned budgets x 3 seeds. At d64 muon's 250-step run already beats adamw's 500-step loss
(>= 2x); at d96 only its 500-step run does (1x to < 2x), so the speed-up shrinks; lion never reaches it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from andrea_lab.commands.compare import main as compare_main
from andrea_lab.commands.compare import scale_parameters
from andrea_lab.experiments.compare import doc_blocks, speedups
from andrea_lab.experiments.compare.runs_table import read_runs_csv, write_runs_csv
from andrea_lab.experiments.sweep.scales import Scale
from andrea_lab.experiments.sweep.suite import load_suite
from tests.andrea_testing import finished_scaled_run

SEEDS = (3100, 3101, 3102)
SCALES = {  # scale -> (size overrides, budget)
    "d64-s250": ({"model.config.d_model": 64, "model.config.n_head": 2}, 250),
    "d64-s500": ({"model.config.d_model": 64, "model.config.n_head": 2}, 500),
    "d96-s250": ({"model.config.d_model": 96, "model.config.n_head": 3}, 250),
    "d96-s500": ({"model.config.d_model": 96, "model.config.n_head": 3}, 500),
}
#: Each variant's loss per scale at its tuned LR (seed k adds k/100); adamw also ran a worse LR (+0.5), which
#: must not set the target.
LOSSES = {
    "adamw": {"d64-s250": 3.00, "d64-s500": 2.80, "d96-s250": 2.70, "d96-s500": 2.50},
    "muon": {"d64-s250": 2.75, "d64-s500": 2.60, "d96-s250": 2.60, "d96-s500": 2.45},
    "lion": {"d64-s250": 2.90, "d64-s500": 2.85, "d96-s250": 2.60, "d96-s500": 2.55},
}
LRS = {"adamw": (1.6e-2, 3.2e-2), "muon": (3.2e-2,), "lion": (4e-3,)}
OPTIMIZERS = {"adamw": "andrea-lab:adamw", "muon": "andrea-lab:muon", "lion": "andrea-lab:lion"}


def planned_runs() -> pd.DataFrame:
    """A runs table as compare reads a searched suite's judged runs (adamw's also at a second, worse LR)."""
    rows = []
    for scale_index, scale in enumerate(SCALES):
        for variant_index, (variant, losses) in enumerate(LOSSES.items()):
            for lr_index, lr in enumerate(LRS[variant]):
                for k, seed in enumerate(SEEDS):
                    loss = losses[scale] + k / 100 + 0.5 * lr_index
                    rows.append(
                        finished_scaled_run("optimizers_planned", variant, variant_index, lr, seed, loss, scale,
                                            scale_index, steps=SCALES[scale][1])
                    )  # fmt: skip
    return pd.DataFrame(rows)


def suite_scales(budgets: bool = True) -> list[Scale]:
    return [
        Scale(name, {**size, **({"trainer.max_steps": steps} if budgets else {})})
        for name, (size, steps) in SCALES.items()
    ]


def test_scales_differing_only_in_max_steps_are_one_size_at_several_budgets():
    found = speedups.sizes(suite_scales())
    assert [(size.name, size.budgets) for size in found] == [
        ("d64", {250: "d64-s250", 500: "d64-s500"}),
        ("d96", {250: "d96-s250", 500: "d96-s500"}),
    ]
    assert speedups.sizes(suite_scales(budgets=False)) == [], "scales without budgets are widths, not budgets"
    widths = [
        Scale("d64", {"model.config.d_model": 64, "trainer.max_steps": 250}),
        Scale("d96", {"trainer.max_steps": 250}),
    ]
    assert speedups.sizes(widths) == [], "one budget per size: nothing to compare in steps"


def test_the_bracket_is_the_shortest_reaching_budget_per_seed_paired_and_at_each_tuned_point():
    table = speedups.speedup_table(
        planned_runs(), speedups.sizes(suite_scales()), "adamw", OPTIMIZERS, {"d64-s250": 300032}
    ).set_index(["size", "variant"])
    assert table.loc[("d64", "muon"), "speedup"] == ">= 2x (3 of 3)"
    assert table.loc[("d96", "muon"), "speedup"] == "1x to < 2x (3 of 3)"  # 2.60 misses 2.50; 2.45 reaches it
    assert table.loc[("d64", "lion"), "speedup"] == "< 1x: not reached (3 of 3)"
    assert (table.loc[("d64", "muon"), "seeds"], table.loc[("d64", "lion"), "seeds"]) == ("3 of 3", "0 of 3")
    assert table.loc[("d64", "muon"), "target"] == "adamw at 500 steps"
    assert (table.loc[("d64", "muon"), "parameters"], table.loc[("d96", "muon"), "parameters"]) == ("0.30M", "")
    assert table.loc[("d64", "muon"), "published"].startswith("1.4x at 0.1B, 1.1x at 1.2B (matrix-based")
    assert "at most ~1.4x" in table.loc[("d64", "lion"), "published"]
    assert "adamw at d64-s250: optimum not bracketed: extend lrs below" in table.loc[("d64", "muon"), "caveat"]


def test_a_seed_that_reached_at_one_budget_and_another_that_did_not_are_counted_apart():
    runs = planned_runs()
    slow = (runs["variant"] == "muon") & (runs["scale"] == "d64-s250") & (runs["seed"] == SEEDS[0])
    runs.loc[slow, ["heldout_loss", "final_val_loss"]] = 2.95  # seed 3100 misses at 250, still reaches at 500
    table = speedups.speedup_table(runs, speedups.sizes(suite_scales()), "adamw", OPTIMIZERS, {})
    row = table.set_index(["size", "variant"]).loc[("d64", "muon")]
    assert row["speedup"] == ">= 2x (2 of 3); 1x to < 2x (1 of 3)"
    assert speedups.span(row["brackets"]) == speedups.Bracket(1.0, float("inf"))


@pytest.mark.parametrize(
    ("spans", "says"),
    [
        ([("d64", (2.0, float("inf"))), ("d96", (1.0, 2.0))], "muon: the speed-up over adamw shrinks with size"),
        ([("d64", (1.0, 2.0)), ("d96", (2.0, float("inf")))], "muon: the speed-up over adamw grows with size"),
        ([("d64", (1.0, float("inf"))), ("d96", (1.0, 2.0))], "muon: not determined: the brackets overlap"),
        ([("d64", (0.0, 1.0)), ("d96", (0.0, 1.0))], "muon: not determined: the brackets overlap"),
        ([("d64", (2.0, float("inf")))], "muon: not determined: a speed-up at 1 size(s) only"),
    ],
)
def test_a_trend_is_said_only_where_the_brackets_show_it(spans, says):
    brackets = [(size, speedups.Bracket(*bounds)) for size, bounds in spans]
    assert speedups.trend_sentence("muon", "adamw", brackets).startswith(says)


def write_suite(tmp_path: Path, budgets: bool = True) -> Path:
    """A suite over the constructed runs: its scales with or without their budgets."""
    (tmp_path / "base.yaml").write_text("model: {}\n")
    scales = [{"name": scale.name, "overrides": scale.overrides} for scale in suite_scales(budgets)]
    variants = [{"name": name, "overrides": {"model.optimizer": optimizer}} for name, optimizer in OPTIMIZERS.items()]
    suite = tmp_path / "optimizers_planned.yaml"
    suite.write_text(
        yaml.safe_dump(
            {"base": "base.yaml", "lrs": [1.6e-2], "seeds": list(SEEDS), "reference": "adamw", "scales": scales}
            | {"variants": variants}
        )
    )
    return suite


@pytest.fixture
def runs_csv(tmp_path: Path) -> Path:
    path = tmp_path / "optimizers_planned" / "runs.csv"
    path.parent.mkdir()
    write_runs_csv(planned_runs(), path)
    return path


def test_compare_prints_the_table_writes_it_to_comparison_md_and_to_the_doc_block(runs_csv, tmp_path, capsys):
    suite, out, doc = write_suite(tmp_path), tmp_path / "out", tmp_path / "results.md"
    assert compare_main([str(runs_csv), "--suite", str(suite), "--out", str(out), "--doc", str(doc)]) == 0
    printed = capsys.readouterr().out
    assert "## Speed-up against size" in printed
    assert "| d64 | 0.60M | 250, 500 | muon | adamw at 500 steps | 3 of 3 | >= 2x (3 of 3) |" in printed
    assert "- muon: the speed-up over adamw shrinks with size (d64 >= 2x; d96 1x to < 2x)" in printed
    assert "- lion: not determined: the brackets overlap" in printed
    assert "## Speed-up against size" in (out / "comparison.md").read_text()
    assert list(pd.read_csv(out / speedups.SPEEDUPS_CSV)["speedup"])[:2] == [
        ">= 2x (3 of 3)",
        "< 1x: not reached (3 of 3)",
    ]
    blocks = {what: content for _, what, content in doc_blocks.generated_blocks(doc.read_text())}
    loaded = load_suite(suite)
    regenerated = speedups.speedup_block(loaded, read_runs_csv(runs_csv), scale_parameters(loaded))
    assert blocks["speedups"] == regenerated, "the doc block regenerates from runs.csv and the suite alone"


def test_a_suite_whose_scales_have_no_budgets_gets_no_table(runs_csv, tmp_path, capsys):
    suite = write_suite(tmp_path, budgets=False)
    assert speedups.speedup_block(load_suite(suite), read_runs_csv(runs_csv)) is None
    assert compare_main([str(runs_csv), "--suite", str(suite), "--out", str(tmp_path / "out")]) == 0
    assert "Speed-up against size" not in capsys.readouterr().out
    assert not (tmp_path / "out" / speedups.SPEEDUPS_CSV).exists()
