"""`andrea compare` on a suite with a scale axis (each claim judged at each scale by the claim function itself,
the trend table, the figures, one report per scale), the attention columns of the per-LR table, and the
committed reports of suites without either, regenerated unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from andrea_lab.commands.compare import main as compare_main
from andrea_lab.experiments.compare import (
    compare,
    doc_blocks,
    plots_scales,
    report,
    scales,
    scales_report,
    search_budgets,
)
from andrea_lab.experiments.compare.runs_table import (
    ATTN_ENTROPY_TAG,
    ATTN_LOGIT_MAX_TAG,
    RUN_COLUMNS,
    load_run,
    load_runs,
    read_runs_csv,
    write_runs_csv,
)
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.runs.directory import (
    DONE_MARKER,
    START_MARKER,
    SUMMARY_FILE,
    HeldOut,
    RunRecord,
    run_version,
    write_record,
)

REPO = Path(__file__).resolve().parents[3]
SCALES = {"d64": 0, "d128": 1}
LRS = (1e-3, 1e-2, 3e-2)
#: b's held-out loss per LR at each scale (5.5 = stuck at init: diverged), and a − b per seed: at d64 a is better
#: on every seed, at d128 the seeds disagree.
B_LOSS = {"d64": (2.5, 2.2, 2.8), "d128": (2.3, 2.0, 5.5)}
A_MINUS_B = {"d64": (-0.30, -0.31, -0.32), "d128": (0.2, -0.3, 0.1)}
CLAIMS = [{"lower_loss": ["a", "b"], "text": "a beats b"}, {"fewer_divergences": ["a", "b"]}]


def write_scaled_run(
    root: Path, scale: str, variant: str, lr: float, seed: int, loss: float, extra: dict | None = None
) -> Path:
    """A run as `andrea sweep` leaves it for a suite with a scale axis (no event files: the record is enough)."""
    run_dir = root / "st" / scale / variant / run_version(lr, seed)
    run_dir.mkdir(parents=True)
    (run_dir / START_MARKER).write_text(
        json.dumps(
            {
                "suite": "st",
                "variant": variant,
                "variant_index": 0 if variant == "b" else 1,
                "lr": lr,
                "seed": seed,
                "scale": scale,
                "scale_index": SCALES[scale],
            }
        )
    )
    diverged = loss >= 5.5
    status = "diverged" if diverged else "finished"
    (run_dir / DONE_MARKER).write_text(json.dumps({"status": status}))
    write_record(
        run_dir,
        RunRecord(
            status=status,
            initial_val_loss=5.5,
            final_val_loss=loss,
            lr=lr,
            seed=seed,
            steps=100,
            divergence={"step": 50 if diverged else None, "kind": "stuck_at_unigram" if diverged else None},
            heldout=HeldOut(loss, 0.05, 4096, 12, 64, 100_000, True, "documents", 0),
        ),
    )
    if extra:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        (run_dir / SUMMARY_FILE).write_text(json.dumps({**summary, **extra}))
    return run_dir


@pytest.fixture
def scaled_runs(tmp_path):
    root = tmp_path / "runs"
    for scale in SCALES:
        for seed in range(3):
            for lr, b_loss in zip(LRS, B_LOSS[scale]):
                logit = {"probe": {"attn_logit_max_final": 10.0 * lr * 1e3 * (2 if scale == "d128" else 1)}}
                write_scaled_run(root, scale, "b", lr, seed, b_loss + seed / 10, extra=logit)
                a_loss = min(b_loss, 5.0) + seed / 10 + A_MINUS_B[scale][seed]
                write_scaled_run(root, scale, "a", lr, seed, a_loss, extra=logit)
    (root / "st" / "suite.yaml").write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "lrs": list(LRS),
                "seeds": [0, 1, 2],
                "reference": "b",
                "claims": CLAIMS,
                "scales": [{"name": name, "overrides": {"model.config.d_model": int(name[1:])}} for name in SCALES],
                "variants": [{"name": "b"}, {"name": "a"}],
            }
        )
    )
    (root / "st" / "base.yaml").write_text("model: {}\n")
    return root


def test_runs_of_every_scale_are_read_with_their_scale_and_none_supersedes_another(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    assert len(runs) == 2 * 3 * 3 * 2 and set(runs["status"]) == {"finished", "diverged"}
    assert scales.has_scales(runs) and scales.scale_order(runs) == ["d64", "d128"]
    assert not scales.has_scales(runs.drop(columns=["scale"]))


def test_each_claim_is_judged_at_each_scale_by_the_claim_function_on_that_scales_runs(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    by_scale = scales.claims_by_scale(runs, CLAIMS, "heldout_loss")
    assert list(by_scale["scale"]) == ["d64", "d128", "d64", "d128"]  # grouped by claim, scales in order
    lower = by_scale[by_scale["claim"] == "lower_loss: a vs b"].set_index("scale")
    assert lower.loc["d64", "outcome"] == "**reproduced**" and lower.loc["d128", "outcome"] == "**not detected**"
    for scale, subset in scales.scale_subsets(runs):
        expected = compare.claims_table(subset, CLAIMS, "heldout_loss")  # one Holm family per scale
        assert lower.loc[scale, "evidence"] == expected.loc[0, "evidence"]
    columns, trend = scales.trend_table(by_scale, ["d64", "d128"])
    assert [c.label for c in columns] == ["claim", "hypothesis", "at d64", "at d128"]
    assert trend.loc[0, "d64"].startswith("**reproduced**: a − b = −0.310 [") and "n=3" in trend.loc[0, "d64"]


def test_a_claim_whose_variant_did_not_run_at_a_scale_is_not_judged_there(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    runs = runs[~((runs["scale"] == "d128") & (runs["variant"] == "a"))]
    by_scale = scales.claims_by_scale(runs, CLAIMS[:1], "heldout_loss").set_index("scale")
    assert (
        by_scale.loc["d128", "outcome"] == "n/a"
        and "no finished or diverged run of a" in by_scale.loc["d128", "evidence"]
    )
    assert by_scale.loc["d64", "outcome"] == "**reproduced**"
    interrupted = runs.index[
        (runs["scale"] == "d64") & (runs["variant"] == "b") & (runs["lr"] == 1e-3) & (runs["seed"] == 0)
    ]
    runs.loc[interrupted, "status"] = "interrupted"  # listed in the trend's notes too, under its scale
    plan = scales.plan_scaled_suite(runs, "b", CLAIMS[:1])
    assert plan["notes"] == ["d64: b: left out lr1e-3-seed0 (interrupted)"]
    assert plan["scales"]["d128"]["claims"] is None  # d128's report judges only claims whose variants ran there


def test_compare_writes_the_trend_a_report_per_scale_and_the_doc_block_of_each_scale(scaled_runs, tmp_path, capsys):
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n")
    assert (
        compare_main([str(scaled_runs / "st"), "--suite", str(scaled_runs / "st" / "suite.yaml"), "--doc", str(doc)])
        == 0
    )
    out = scaled_runs / "st" / "compare"
    markdown = (out / "comparison.md").read_text()
    assert markdown.startswith("# Comparison: st, by scale")
    assert "## Claims at each scale" in markdown and "| claim | hypothesis | at d64 | at d128 |" in markdown
    assert "| d128 | b | 9 | 1e-2 |" in markdown  # the variants at each scale
    for scale in SCALES:
        assert (out / scale / "comparison.md").read_text().startswith(f"# Comparison: st at {scale}")
    for figure in ("loss_vs_lr_by_scale", "lr_sensitivity_by_scale", "attn_logit_vs_lr_by_scale"):
        assert (out / f"{figure}.png").stat().st_size > 0
    assert (scaled_runs / "st" / "_comparison").is_dir()
    written = pd.read_csv(out / "runs.csv")
    assert list(written.columns) == [*RUN_COLUMNS, "scale", "scale_index", "attn_logit_max_final"]
    assert "at d128" in capsys.readouterr().out
    ((_, _, block),) = doc_blocks.generated_blocks(doc.read_text())  # --doc: each scale's claims block, under its name
    runs = load_runs(scaled_runs, events=False)
    assert block == "\n\n".join(
        f"**At {scale}**: " + report.claims_block(subset, CLAIMS) for scale, subset in scales.scale_subsets(runs)
    )
    claims = pd.read_csv(out / "claims.csv")
    assert (
        compare_main(
            [str(out / "runs.csv"), "--out", str(out / "again"), "--suite", str(scaled_runs / "st" / "suite.yaml")]
        )
        == 0
    )  # runs.csv is enough
    assert pd.read_csv(out / "again" / "claims.csv").equals(claims)


def test_the_figures_have_a_panel_per_variant_and_a_curve_per_scale(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    by_scale = {scale: compare.build_variants(subset, "b") for scale, subset in scales.scale_subsets(runs)}
    loss = plots_scales.by_lr_figure(by_scale, lambda v: v.capped, "loss", "title")
    assert [(ax.get_title(), ax.get_xscale(), ax.get_yscale()) for ax in loss.axes] == [
        ("b", "log", "linear"),
        ("a", "log", "linear"),
    ]
    assert loss.axes[0].get_legend_handles_labels()[1] == ["d64", "d128"]
    logits = plots_scales.by_lr_figure(by_scale, plots_scales._attention_logits, "logit", "title", log_y=True)
    assert {ax.get_yscale() for ax in logits.axes} == {"log"}
    sensitivity = plots_scales.sensitivity_figure(by_scale)
    assert [t.get_text() for t in sensitivity.axes[0].get_xticklabels()] == ["d64", "d128"]
    assert sensitivity.axes[0].get_legend_handles_labels()[1] == ["b", "a"]


def test_the_final_attention_values_come_from_the_summary_else_the_probe_curves(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    recorded = write_scaled_run(
        tmp_path,
        "d64",
        "b",
        1e-3,
        0,
        2.0,
        extra={"stability": {"attn_logit_max_final": 7.5, "attn_entropy_min_final": 0.25}},
    )
    curves_only = write_scaled_run(tmp_path, "d64", "b", 1e-3, 1, 2.0)
    for run_dir in (recorded, curves_only):
        writer = SummaryWriter(str(run_dir))
        for step, scale in ((0, 1.0), (100, 4.0)):
            writer.add_scalar(f"{ATTN_LOGIT_MAX_TAG}/block_00", 2.0 * scale, step)
            writer.add_scalar(f"{ATTN_LOGIT_MAX_TAG}/block_01", 3.0 * scale, step)
            writer.add_scalar(f"{ATTN_ENTROPY_TAG}/block_00", 2.0 / scale, step)
            writer.add_scalar(f"{ATTN_ENTROPY_TAG}/block_01", 1.0 / scale, step)
        writer.close()
    row = load_run(recorded, tmp_path)
    assert (row["attn_logit_max_final"], row["attn_entropy_min_final"]) == (7.5, 0.25)
    row = load_run(curves_only, tmp_path)
    assert (row["attn_logit_max_final"], row["attn_entropy_min_final"]) == (12.0, 0.25)  # max / min over blocks
    bare = load_run(write_scaled_run(tmp_path, "d64", "b", 1e-3, 2, 2.0), tmp_path)
    assert "attn_logit_max_final" not in bare and "attn_entropy_min_final" not in bare
    at_init_only = write_scaled_run(tmp_path, "d64", "b", 1e-3, 3, 2.0)  # stopped before its second probe
    writer = SummaryWriter(str(at_init_only))
    writer.add_scalar(f"{ATTN_LOGIT_MAX_TAG}/block_00", 2.0, 0)
    writer.close()
    assert "attn_logit_max_final" not in load_run(at_init_only, tmp_path)


def test_the_per_lr_table_gains_the_attention_columns_only_when_runs_have_them(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    d64 = runs[runs["scale"] == "d64"]
    with_logits = compare.build_variants(d64, "b")
    assert [c.label for c in compare.per_lr_columns(with_logits)[-1:]] == ["final max attn logit"]
    table = compare.per_lr_table(with_logits)
    assert list(table.loc[table["lr"].str.startswith("1e-2"), "attn_logit_max_final"]) == ["100 ± 0", "100 ± 0"]
    without = compare.build_variants(d64.drop(columns=["attn_logit_max_final"]), "b")
    assert compare.per_lr_columns(without) == compare.PER_LR_COLUMNS


def _committed_suites(scaled: bool) -> list[str]:
    """The suites with a committed table in docs/results/, with (``scaled``) or without a scale axis."""
    return sorted(
        p.name
        for p in (REPO / "docs" / "results").iterdir()
        if p.is_dir() and bool(load_suite(REPO / "experiments" / "suites" / f"{p.name}.yaml").scales) is scaled
    )


@pytest.mark.parametrize("suite", _committed_suites(scaled=False))
def test_the_committed_reports_of_suites_without_scales_regenerate_unchanged(suite, tmp_path):
    """From the committed runs.csv: the same runs.csv bytes, and the claims and per-LR sections exactly as in the
    committed comparison.md (no scale axis, no attention values: nothing of this module may show)."""
    committed = REPO / "docs" / "results" / suite
    runs = read_runs_csv(committed / "runs.csv")
    write_runs_csv(runs, tmp_path / "runs.csv")
    assert (tmp_path / "runs.csv").read_bytes() == (committed / "runs.csv").read_bytes()
    definition = load_suite(REPO / "experiments" / "suites" / f"{suite}.yaml")
    runs = search_budgets.with_recorded_edges(runs, committed / "runs.csv")  # as compare judged a search's runs
    plan = report.plan_suite(runs, definition.reference, definition.claims)
    sections = dict(report.suite_sections(suite, plan["variants"], runs, plan["claims"], [], plan["loss_column"]))
    _each_once_in(sections, (committed / "comparison.md").read_text(encoding="utf-8"), suite)


#: The sections of a comparison.md that a runs.csv alone regenerates (curves, plots and notes need the run dirs).
FROM_A_TABLE = ("per_lr", "claims", "gave_way_first", "variants_by_scale")


def _each_once_in(sections: dict[str, str], markdown: str, where: str) -> None:
    """Each section a runs.csv regenerates is in the committed report exactly as regenerated, and once (a report
    spliced by hand once held its claims across scales twice, and its 'What gave way first' in another order)."""
    for key in FROM_A_TABLE:
        if sections.get(key):
            assert markdown.count(sections[key]) == 1, f"{where}: {key} (rerun andrea compare)"
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert len(headings) == len(set(headings)), f"{where}: a section twice"


@pytest.mark.parametrize("suite", _committed_suites(scaled=True))
def test_the_committed_reports_of_scaled_suites_regenerate_unchanged(suite):
    """A committed scaled suite (docs/results/<suite>/): from its runs.csv alone, the claims-at-each-scale table
    of its trend report and each scale's per-LR and claims sections, exactly as committed."""
    committed = REPO / "docs" / "results" / suite
    runs = search_budgets.with_recorded_edges(read_runs_csv(committed / "runs.csv"), committed / "runs.csv")
    definition = load_suite(REPO / "experiments" / "suites" / f"{suite}.yaml")
    plan = scales.plan_scaled_suite(runs, definition.reference, definition.claims)
    trend = dict(scales_report.scaled_sections(suite, plan))
    variants_table = trend["variants"].split("## Variants at each scale")[-1]  # the header above names the scales
    trend = {"claims": trend.get("claims", ""), "variants_by_scale": variants_table}  # a ladder has no claims here
    _each_once_in(trend, (committed / "comparison.md").read_text(encoding="utf-8"), suite)
    # Each finished scale is committed as it ends (a suite whose larger scale has not run yet has fewer).
    assert plan["scales"] and set(plan["scales"]) <= {s.name for s in definition.scales}
    for scale, scale_plan in plan["scales"].items():
        sections = dict(
            report.suite_sections(
                suite, scale_plan["variants"], scale_plan["runs"], scale_plan["claims"], [], scale_plan["loss_column"]
            )
        )
        _each_once_in(sections, (committed / scale / "comparison.md").read_text(encoding="utf-8"), f"{suite} {scale}")


def test_the_legend_explains_the_attention_columns_only_when_shown(scaled_runs):
    runs = load_runs(scaled_runs, events=False)
    d64 = runs[runs["scale"] == "d64"]
    for frame, shown in ((d64, True), (d64.drop(columns=["attn_logit_max_final"]), False)):
        variants = compare.build_variants(frame, "b")
        legend = dict(report.suite_sections("st", variants, frame, None, [], "heldout_loss"))["legend"]
        assert ("**final max attn logit**" in legend) is shown and "min attn entropy" not in legend
        assert legend.startswith(report.legend("heldout_loss"))


# ====================================================================== claims across scales (the interaction)


def _runs_with_gaps(gap_by_scale: dict[str, tuple[float, ...]]) -> pd.DataFrame:
    """Runs of a and b at each scale (in the dict's order) over three LRs: b is flat at 2.0 except +0.1 off its
    optimum; a's loss away from its optimum is raised so that a's LR sensitivity minus b's is the given gap for
    each seed (one seed per value)."""
    rows = []
    for index, (scale, gaps) in enumerate(gap_by_scale.items()):
        for seed, gap in enumerate(gaps):
            b = (2.1, 2.0, 2.1)
            a = (2.1 + 1.5 * gap, 2.0, 2.1 + 1.5 * gap)  # sensitivity = mean - min: (0.2 + 3 gap) / 3 vs 0.2 / 3
            for variant, losses in (("a", a), ("b", b)):
                for lr, loss in zip(LRS, losses):
                    rows.append(
                        {
                            "variant": variant,
                            "lr": lr,
                            "seed": seed,
                            "status": "finished",
                            "final_val_loss": loss,
                            "initial_val_loss": 5.5,
                            "divergence_kind": None,
                            "scale": scale,
                            "scale_index": index,
                        }
                    )
    return pd.DataFrame(rows)


GROWS = [{"sensitivity_gap_grows": ["a", "b"], "text": "a's LR sensitivity pulls away from b's with width"}]


def test_a_gap_that_grows_with_scale_is_reproduced_with_its_slope_and_interval():
    runs = _runs_with_gaps({"d64": (0.00, 0.01, 0.02), "d128": (0.10, 0.11, 0.12), "d256": (0.20, 0.21, 0.22)})
    gaps = scales.sensitivity_gaps(runs, "a", "b", "final_val_loss")
    assert [scale for scale, _ in gaps] == ["d64", "d128", "d256"]
    assert [round(gap.mean, 6) for _, gap in gaps] == [0.01, 0.11, 0.21]
    trend = scales.gap_trend(gaps)
    assert trend.slope == pytest.approx(0.10) and trend.low < 0.10 < trend.high and trend.n == 9
    judged = scales.judge_across_scales(runs, GROWS, "final_val_loss")
    assert list(judged["outcome"]) == ["reproduced"]
    assert "slope +0.100 [" in judged["evidence"][0] and "d256 +0.210" in judged["evidence"][0]


def test_a_gap_large_at_every_scale_but_not_growing_is_not_an_interaction():
    """Each scale alone would show a lower sensitivity for b; the trend claim asks whether the gap grows."""
    runs = _runs_with_gaps({"d64": (0.20, 0.10, 0.15), "d128": (0.12, 0.21, 0.14), "d256": (0.16, 0.11, 0.20)})
    assert list(scales.judge_across_scales(runs, GROWS, "final_val_loss")["outcome"]) == ["not detected"]
    shrinking = _runs_with_gaps({"d64": (0.30, 0.31, 0.32), "d128": (0.20, 0.21, 0.22), "d256": (0.10, 0.11, 0.12)})
    assert list(scales.judge_across_scales(shrinking, GROWS, "final_val_loss")["outcome"]) == ["contradicted"]


def test_a_claim_across_scales_goes_into_the_report_and_the_doc_block_and_not_into_any_one_scale():
    runs = _runs_with_gaps({"d64": (0.00, 0.01, 0.02), "d128": (0.10, 0.11, 0.12)})
    claims = GROWS + [{"lower_sensitivity": ["b", "a"]}]
    block = scales_report.claims_block_by_scale(runs, claims)
    assert "**Across scales**" in block and "sensitivity_gap_grows: a vs b" in block
    assert block.count("sensitivity_gap_grows") == 1  # not judged at d64 or d128 on their own
    plan = scales.plan_scaled_suite(runs, "b", claims)
    assert list(plan["claims"]["claim"].unique()) == ["lower_sensitivity: b vs a"]
    assert "## Claims across scales" in dict(scales_report.scaled_sections("st", plan))["claims"]


def test_a_claim_across_scales_needs_a_suite_with_scales_and_takes_no_lr(tmp_path):
    base = REPO / "experiments" / "cpu-base.yaml"
    suite = {
        "base": str(base),
        "lrs": [1e-3, 1e-2],
        "seeds": [0],
        "claims": GROWS,
        "variants": [{"name": "a"}, {"name": "b"}],
    }
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(ValueError, match="compares a difference across scales; this suite has no scales"):
        load_suite(path)
    suite["scales"] = [{"name": "d64", "overrides": {"model.config.d_model": 64}}]
    path.write_text(yaml.safe_dump(suite))
    assert load_suite(path).claims[0] == GROWS[0]
    suite["claims"] = [{**GROWS[0], "lr": 1e-3}]
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(ValueError, match="measured over the whole LR grid and takes no lr"):
        load_suite(path)
