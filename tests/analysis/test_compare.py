"""`andrea compare`: the arithmetic on hand-made numbers, then reading a hand-made runs directory
(TensorBoard event files written with SummaryWriter, summary.json, sweep markers) into tables and plots."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from andrea_lab.analysis.compare import (RunRecord, best_key, capped_loss, count_spikes, count_within, find_runs,
                                         init_profile, load_run, lr_sensitivity, mark_verdicts, mean_std, summarise_variant,
                                         verdict)
from andrea_lab.commands.compare import main as compare_main
from andrea_lab.rundir import DONE_MARKER, FAILED_MARKER, START_MARKER
from andrea_lab.sweep.suite import run_version

NAN = math.nan

# ====================================================================== arithmetic


def test_capped_loss_caps_at_the_loss_at_init():
    assert capped_loss(3.0, 5.5) == 3.0
    assert capped_loss(7.0, 5.5) == 5.5
    assert capped_loss(NAN, 5.5) == 5.5
    assert capped_loss(math.inf, 5.5) == 5.5
    assert capped_loss(None, 5.5) == 5.5


def test_lr_sensitivity_by_hand():
    # capped: [3.0, 2.5, 5.5, 5.5]: mean 4.125, best 2.5
    assert lr_sensitivity([3.0, 2.5, NAN, 6.0], 5.5) == pytest.approx(1.625)
    # every LR as good as the best: 0
    assert lr_sensitivity([2.0, 2.0, 2.0], 5.5) == pytest.approx(0.0)
    # a single LR has no sensitivity
    assert lr_sensitivity([2.0], 5.5) == 0.0
    # per-LR losses at init: capped [3.0, 5.0] -> mean 4.0 - 3.0
    assert lr_sensitivity([3.0, 9.0], [5.5, 5.0]) == pytest.approx(1.0)
    # diverged runs are capped, never infinite
    assert math.isfinite(lr_sensitivity([math.inf, NAN, 1e30], 5.5))
    with pytest.raises(ValueError):
        lr_sensitivity([1.0, 2.0], [5.0])


def test_mean_std_is_the_sample_std_over_seeds():
    mean, std = mean_std([2.0, 2.2])
    assert mean == pytest.approx(2.1) and std == pytest.approx(math.sqrt(0.02))
    mean, std = mean_std([4.0])
    assert mean == 4.0 and math.isnan(std)
    assert all(math.isnan(v) for v in mean_std([]))


def test_no_difference_rule():
    # spread = max(0.1, 0.05) = 0.1; differences below 0.2 are no difference
    assert verdict(2.15, 0.1, 2.0, 0.05) == "no difference"
    assert verdict(2.25, 0.1, 2.0, 0.05) == "worse by 0.250"
    assert verdict(2.0, 0.05, 2.25, 0.1) == "better by 0.250"
    assert verdict(2.15, 0.01, 2.0, 0.1) == "no difference", "the larger of the two spreads counts"
    assert verdict(2.19, 0.1, 2.0, 0.0) == "no difference"
    assert verdict(2.21, 0.1, 2.0, 0.0) == "worse by 0.210"
    assert verdict(2.3, NAN, 2.0, NAN) == "worse by 0.300 (seed spread unknown)"
    assert verdict(NAN, 0.1, 2.0, 0.1) == "n/a"


def test_best_lr_and_grid_points_near_it():
    losses = {1e-3: 3.0, 3e-3: 2.05, 1e-2: 2.0, 3e-2: 5.5}
    assert best_key(losses) == 1e-2
    assert best_key({1e-3: 2.0, 1e-2: 2.0}) == 1e-3, "ties go to the smaller learning rate"
    assert count_within(losses.values(), 2.0) == 2
    assert count_within([2.0, 2.1, 2.1001], 2.0) == 2


def test_spikes_are_jumps_above_the_recent_median_counted_once():
    flat = [3.0] * 12
    assert count_spikes(flat) == 0
    assert count_spikes(flat + [3.6, 3.7, 3.0, 3.0, 4.0]) == 2  # 3.6-3.7 is one spike, 4.0 another
    assert count_spikes(flat + [3.4]) == 0, "0.4 nat is below the 0.5-nat threshold"
    assert count_spikes([5.0, 4.0, 3.0, 2.5, 2.0]) == 0, "early points (no history) are never spikes"
    assert count_spikes(flat + [NAN, math.inf]) == 0, "non-finite values are divergence, not spikes"


def record(variant, lr, seed, final, init=5.5, status="finished", kind=None, grad=(1.0, 2.0), spikes=0):
    return RunRecord(path=Path(f"/runs/s/{variant}/{run_version(lr, seed)}"), suite="s", variant=variant, lr=lr,
                     seed=seed, status=status, initial_val_loss=init, final_val_loss=final, divergence_kind=kind,
                     grad_norm_median=grad[0], grad_norm_max=grad[1], spike_count=spikes)


def hand_made_variants():
    a = [record("a", 1e-3, 0, 3.0), record("a", 1e-3, 1, 3.2),
         record("a", 1e-2, 0, 2.0, grad=(0.5, 4.0)), record("a", 1e-2, 1, 2.2, grad=(0.7, 3.0), spikes=1)]
    b = [record("b", 1e-3, 0, 2.5), record("b", 1e-3, 1, 2.6),
         record("b", 1e-2, 0, 2.0, status="diverged", kind="nonfinite", spikes=2),  # last val before the blow-up
         record("b", 1e-2, 1, 6.0, status="diverged", kind="final_above_best")]
    c = [record("c", 1e-3, 0, 3.1), record("c", 1e-3, 1, 3.3), record("c", 1e-2, 0, 2.05), record("c", 1e-2, 1, 2.3),
         record("c", 3e-2, 0, None, status="failed"), record("c", 3e-2, 1, None, status="interrupted")]
    return a, b, c


def test_variant_summary_by_hand():
    a, b, c = hand_made_variants()
    sa = summarise_variant("s", "a", a)
    assert sa.best_lr == 1e-2
    assert (sa.best_mean, sa.best_std) == (pytest.approx(2.1), pytest.approx(math.sqrt(0.02)))
    assert (sa.sensitivity_mean, sa.sensitivity_std) == (pytest.approx(0.5), pytest.approx(0.0))
    assert sa.diverged_per_lr == {1e-3: (0, 2), 1e-2: (0, 2)}
    assert sa.within == 1 and sa.spikes == 1
    assert (sa.grad_norm_median, sa.grad_norm_max) == (pytest.approx(0.6), 4.0), "at the best LR"

    sb = summarise_variant("s", "b", b)
    # lr 1e-2: a non-finite blow-up counts as the loss at init whatever its last validation said; 6.0 is capped
    assert sb.cells[1e-2].capped == [5.5, 5.5]
    assert sb.best_lr == 1e-3 and sb.best_mean == pytest.approx(2.55)
    # seed 0: mean(2.5, 5.5) - 2.5 = 1.5; seed 1: mean(2.6, 5.5) - 2.6 = 1.45
    assert sb.sensitivity_mean == pytest.approx(1.475) and sb.sensitivity_std == pytest.approx(0.05 / math.sqrt(2))
    assert sb.diverged_per_lr == {1e-3: (0, 2), 1e-2: (2, 2)}
    assert sb.spikes == 2

    sc = summarise_variant("s", "c", c)
    assert sc.runs == 4 and [r.status for r in sc.excluded] == ["failed", "interrupted"]
    assert sorted(sc.cells) == [1e-3, 1e-2]


def test_verdicts_between_variants_by_hand():
    summaries = [summarise_variant("s", name, runs) for name, runs in zip("abc", hand_made_variants())]
    mark_verdicts(summaries)
    sa, sb, sc = summaries
    assert sa.vs_best == "best"
    assert sb.vs_best == "worse by 0.450"          # 0.45 > 2 x max(0.141, 0.071)
    assert sc.vs_best == "no difference"           # 0.075 < 2 x 0.177
    assert sa.vs_most_robust == "most robust"
    assert sb.vs_most_robust == "worse by 0.975"   # 1.475 - 0.5, spreads 0.035 and 0
    # c: seed 0 (3.1, 2.05) -> 0.525, seed 1 (3.3, 2.3) -> 0.5; 0.0125 above a, below 2 x 0.0177
    assert sc.vs_most_robust == "no difference"


# ====================================================================== reading a runs directory


def write_run(root: Path, variant: str, lr: float, seed: int, val, train=None, grads=None, layers=None,
              summary=None, marker=DONE_MARKER, suite="toy", name=None, index=0, deltas=None) -> Path:
    run_dir = root / suite / variant / (name or run_version(lr, seed))
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    for tag, curve in (("val/loss", val), ("train/loss", train or []), ("train/grad_norm", grads or [])):
        for step, value in curve:
            writer.add_scalar(tag, value, step)
    for layer, value in (layers or {}).items():
        writer.add_scalar(f"stability/grad_norm/{layer}", value, 0)
        writer.add_scalar(f"stability/grad_norm/{layer}", value * 10, 50)
    for sublayer, value in (deltas or {}).items():
        writer.add_scalar(f"stability/delta_ratio/{sublayer}", value, 0)
        writer.add_scalar(f"stability/delta_ratio/{sublayer}", value * 100, 50)  # later steps must not count
    writer.close()
    (run_dir / START_MARKER).write_text(json.dumps({"suite": suite, "variant": variant, "lr": lr, "seed": seed,
                                                     "variant_index": index}))
    if marker:
        (run_dir / marker).write_text(json.dumps({"status": "finished"} if marker == DONE_MARKER else {}))
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def curve(init, final, steps=(0, 50, 100)):
    return [(steps[0], init), (steps[1], (init + final) / 2), (steps[2], final)]


@pytest.fixture
def toy_runs(tmp_path):
    """Variants b (listed first in its suite) and a: a is better and more robust."""
    root = tmp_path / "runs"
    train = [(s, 5.0 - 0.02 * s) for s in range(0, 100, 5)]
    layers = {"block_00": 0.1, "block_01": 0.2, "embeddings": 0.05}
    for seed, (fa1, fa2, fb1) in enumerate([(3.0, 2.0, 2.5), (3.2, 2.2, 2.6)]):
        write_run(root, "a", 1e-3, seed, curve(5.5, fa1), train, [(s, 1.0 + s / 100) for s in range(100)], layers,
                  index=1)
        write_run(root, "b", 1e-3, seed, curve(5.5, fb1), train, index=0)
    write_run(root, "a", 1e-2, 0, curve(5.5, 2.0), train, layers=layers, index=1)
    # summary.json wins over the events for the numbers it holds
    write_run(root, "a", 1e-2, 1, curve(5.5, 2.9), train, layers=layers, index=1, marker=None,
              summary={"schema": 1, "status": "finished", "initial_val_loss": 5.5, "final_val_loss": 2.2,
                       "spike_count": 3, "grad_norm_median": 0.7, "grad_norm_max": 3.0, "lr": 1e-2, "seed": 1,
                       "divergence": {"step": None, "kind": None}})
    write_run(root, "b", 1e-2, 0, [(0, 5.5), (50, 4.0), (100, NAN)], train, index=0)   # blew up
    write_run(root, "b", 1e-2, 1, curve(5.5, 6.0), train, index=0)                      # ended above init
    # moved aside by a resumed sweep: never counted (it would be the best run otherwise)
    write_run(root, "a", 1e-2, 0, curve(5.5, 0.1), name=run_version(1e-2, 0) + ".interrupted-20240101-000000")
    # a failed run: listed, not counted
    write_run(root, "a", 3e-2, 0, curve(5.5, 5.0), marker=FAILED_MARKER, index=1)
    return root


def test_find_runs_skips_directories_moved_aside(toy_runs):
    runs = find_runs(toy_runs)
    assert len(runs) == 9
    assert not any(".interrupted-" in str(path) for path in runs)
    assert find_runs(toy_runs / "toy" / "a" / "lr1e-3-seed0") == [toy_runs / "toy" / "a" / "lr1e-3-seed0"]


def test_load_run_from_events_and_from_summary(toy_runs):
    from_events = load_run(toy_runs / "toy" / "a" / "lr1e-3-seed1", toy_runs)
    assert (from_events.suite, from_events.variant, from_events.lr, from_events.seed) == ("toy", "a", 1e-3, 1)
    assert from_events.status == "finished" and from_events.source == "events"
    assert from_events.initial_val_loss == pytest.approx(5.5) and from_events.final_val_loss == pytest.approx(3.2)
    assert from_events.grad_norm_median == pytest.approx(1.495, abs=1e-3)
    assert from_events.init_grad_norms == {"block_00": pytest.approx(0.1), "block_01": pytest.approx(0.2),
                                           "embeddings": pytest.approx(0.05)}
    from_summary = load_run(toy_runs / "toy" / "a" / "lr1e-2-seed1", toy_runs)
    assert from_summary.source == "summary.json"
    assert from_summary.final_val_loss == 2.2 and from_summary.spike_count == 3
    blew_up = load_run(toy_runs / "toy" / "b" / "lr1e-2-seed0", toy_runs)
    assert (blew_up.status, blew_up.divergence_kind, blew_up.divergence_step) == ("diverged", "nonfinite", 100)
    above = load_run(toy_runs / "toy" / "b" / "lr1e-2-seed1", toy_runs)
    assert (above.status, above.divergence_kind) == ("diverged", "above_init")


def test_load_run_identifies_plain_fit_runs_from_the_layout_and_config(tmp_path):
    run_dir = tmp_path / "runs" / "quickstart" / "version_0"
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    writer.add_scalar("val/loss", 9.0, 0)
    writer.add_scalar("val/loss", 6.0, 100)
    writer.close()
    (run_dir / "config.yaml").write_text("seed_everything: 1337\nmodel:\n  lr: 0.002\n  config:\n    vocab_size: 8449\n")
    run = load_run(run_dir, tmp_path / "runs")
    assert (run.suite, run.variant, run.lr, run.seed, run.status) == ("runs", "quickstart", 0.002, 1337, "unknown")
    assert run.counted and run.final_val_loss == 6.0


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_compare_writes_markdown_csv_and_plots(toy_runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert compare_main([str(toy_runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    markdown = (out / "comparison.md").read_text()
    tables, at_init = markdown.split("## At initialisation")
    rows = [line for line in tables.splitlines() if line.startswith("| a |") or line.startswith("| b |")]
    assert "| a | 4 | 0.050 | 0.100 | 0.200 | 0.50 |" in at_init, "only a logged layer gradients"
    assert len(rows) == 2 + 4, "one summary row per variant, one per-LR row per variant and LR"
    assert markdown.index("| b |") < markdown.index("| a |"), "variants in suite order"
    a_row = next(line for line in rows if line.startswith("| a | 4 |"))
    assert "| 1e-2 | 2.100 ± 0.141 | best |" in a_row
    assert "| 0.500 ± 0.000 | most robust |" in a_row
    assert "1e-3: 0/2 · 1e-2: 0/2" in a_row and "| 4 |" in a_row  # spikes: 3 from summary.json + 1 from events
    b_row = next(line for line in rows if line.startswith("| b | 4 |"))
    assert "| 1e-3 | 2.550 ± 0.071 | worse by 0.450 |" in b_row
    assert "1e-3: 0/2 · 1e-2: 2/2" in b_row
    assert "a: left out lr3e-2-seed0 (failed)" in markdown
    assert "LR sensitivity" in markdown and "twice the seed spread" in markdown
    table = {row["variant"]: row for row in read_csv(out / "comparison.csv")}
    assert set(table) == {"a", "b"}
    assert float(table["a"]["val_loss_mean"]) == pytest.approx(2.1)
    assert float(table["b"]["lr_sensitivity_mean"]) == pytest.approx(1.475)
    assert table["b"]["diverged_total"] == "2" and table["b"]["vs_best_variant"] == "worse by 0.450"
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 9 and {r["status"] for r in runs} == {"finished", "diverged", "failed"}
    for name in ("loss_curves.png", "loss_vs_lr.png", "grad_norm_init.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| a | 4 |" in printed and str(out / "comparison.md") in printed


def test_the_picture_at_init_is_averaged_over_runs_by_hand(tmp_path):
    root = tmp_path / "runs"
    layers = {"block_00": 2.0, "block_01": 1.0, "block_02": 0.5, "embeddings": 0.25}
    for seed, scale in ((0, 1.0), (1, 3.0)):
        write_run(root, "pre", 1e-3, seed, curve(5.5, 3.0), layers={k: v * scale for k, v in layers.items()},
                  deltas={"block_00_attn": 0.1 * scale, "block_01_attn": 0.3 * scale, "block_02_attn": 0.2 * scale,
                          "block_00_mlp": 0.5, "block_01_mlp": 0.7, "block_02_mlp": 0.6})
    runs = [load_run(path, root) for path in find_runs(root)]
    profile = init_profile(runs)
    assert profile["embeddings"] == pytest.approx(0.5) and profile["first_block"] == pytest.approx(4.0)
    assert profile["last_block"] == pytest.approx(1.0) and profile["first_over_last"] == pytest.approx(4.0)
    assert profile["attn_delta_mean"] == pytest.approx(0.4) and profile["attn_delta_max"] == pytest.approx(0.6)
    assert profile["mlp_delta_mean"] == pytest.approx(0.6) and profile["mlp_delta_max"] == pytest.approx(0.7)
    out = tmp_path / "out"
    assert compare_main([str(root / "toy"), "--out", str(out)]) == 0
    markdown = (out / "comparison.md").read_text()
    assert "## At initialisation" in markdown
    assert "| pre | 2 | 0.500 | 4.000 | 1.000 | 4.00 | 0.400 (0.600) | 0.600 (0.700) |" in markdown
    assert (out / "delta_ratio_init.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grad_norm_plot_is_skipped_with_a_note_without_layer_scalars(tmp_path):
    root = tmp_path / "runs"
    for variant in ("pre", "post"):
        for seed in (0, 1):
            write_run(root, variant, 1e-3, seed, curve(5.5, 3.0 + seed / 10))
    out = tmp_path / "out"
    assert compare_main([str(root / "toy"), "--out", str(out)]) == 0
    assert not (out / "grad_norm_init.png").exists() and not (out / "delta_ratio_init.png").exists()
    assert "gradient norm by layer at init: skipped" in (out / "comparison.md").read_text()
    assert "## At initialisation" not in (out / "comparison.md").read_text()
    assert (out / "loss_curves.png").exists()


def test_several_suites_get_one_directory_each(tmp_path, monkeypatch):
    from andrea_lab.analysis import plots

    for name in ("plot_loss_curves", "plot_loss_vs_lr", "plot_init_grad_norms", "plot_init_delta_ratios"):
        monkeypatch.setattr(plots, name, lambda summaries, path: None)
    root = tmp_path / "runs"
    write_run(root, "pre", 1e-3, 0, curve(5.5, 3.0), suite="one")
    write_run(root, "pre", 1e-3, 0, curve(5.5, 3.0), suite="two")
    assert compare_main([str(root)]) == 0
    assert (root / "compare" / "one" / "comparison.md").exists()
    assert (root / "compare" / "two" / "comparison.csv").exists()


def test_compare_errors(tmp_path, capsys):
    assert compare_main([str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert compare_main([str(tmp_path)]) == 2
    assert "no runs under" in capsys.readouterr().err


def test_a_variant_that_diverged_everywhere_is_not_the_most_robust():
    def run(variant, lr, seed, final, status="finished"):
        return RunRecord(path=Path(f"/{variant}/{lr}/{seed}"), suite="s", variant=variant, lr=lr, seed=seed,
                         status=status, initial_val_loss=5.5, final_val_loss=final,
                         divergence_kind="stuck" if status == "diverged" else None)
    good = [run("good", lr, seed, final + seed / 100) for lr, final in ((1e-3, 2.5), (1e-2, 2.9)) for seed in (0, 1)]
    stuck = [run("stuck", lr, seed, 3.1, "diverged") for lr in (1e-3, 1e-2) for seed in (0, 1)]
    summaries = [summarise_variant("s", "good", good), summarise_variant("s", "stuck", stuck)]
    mark_verdicts(summaries)
    assert summaries[1].sensitivity_mean == pytest.approx(0.0), "flat at the unigram level: no LR sensitivity"
    assert summaries[1].vs_most_robust == "n/a: diverged at every LR"
    assert summaries[0].vs_most_robust == "most robust"


def test_different_lr_grids_are_flagged_once():
    from andrea_lab.analysis.compare import summarise

    a, b, _ = hand_made_variants()
    result = summarise(a + [r for r in b if r.lr == 1e-3])
    notes = [note for s in result["s"] for note in s.notes]
    assert sum("different LR grids" in note for note in notes) == 1
