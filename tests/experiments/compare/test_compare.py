"""`andrea compare`: a hand-made runs directory (summary.json records, TensorBoard event files, sweep
markers) read into a frame, reduced to paired comparisons and claims, written as Markdown, CSV and plots;
and the generated claims blocks of docs/results.md, regenerated from the committed runs.csv byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from andrea_lab.commands.compare import ladder_blocks, scale_parameters
from andrea_lab.commands.compare import main as compare_main
from andrea_lab.experiments.compare import compare, doc_blocks, domains, outputs, report, search_budgets, speedups
from andrea_lab.experiments.compare.project import PROJECT, project_block
from andrea_lab.experiments.compare.runs_table import find_runs, load_run, load_runs, read_runs_csv, write_runs_csv
from andrea_lab.experiments.sweep.suite import load_suite, run_version
from andrea_lab.runs.directory import (
    DONE_MARKER,
    FAILED_MARKER,
    START_MARKER,
    SUMMARY_FILE,
    HeldOut,
    RunRecord,
    write_record,
)

REPO = Path(__file__).resolve().parents[3]


def heldout(loss):
    return None if loss is None else HeldOut(loss, 0.05, 4096, 12, 64, 100_000, True, "documents", 0)


def write_run(
    root: Path,
    variant: str,
    lr: float,
    seed: int,
    loss,
    status="finished",
    kind=None,
    index=0,
    suite="toy",
    name=None,
    marker=DONE_MARKER,
    spikes=0,
    layers=None,
    record=True,
) -> Path:
    """A run directory as `andrea sweep` leaves it; ``loss`` is the held-out loss (in-training val + 0.1)."""
    run_dir = root / suite / variant / (name or run_version(lr, seed))
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    for step, value in ((0, 5.5), (100, 5.5 if loss is None else loss + 0.1)):
        writer.add_scalar("val/loss", value, step)
        writer.add_scalar("train/loss", value, step)
    for layer, value in (layers or {}).items():
        writer.add_scalar(f"stability/grad_norm/{layer}", value, 0)
        writer.add_scalar(f"stability/grad_norm/{layer}", value * 10, 50)  # later steps must not count
    writer.close()
    (run_dir / START_MARKER).write_text(
        json.dumps({"suite": suite, "variant": variant, "lr": lr, "seed": seed, "variant_index": index})
    )
    if marker:
        (run_dir / marker).write_text(json.dumps({"status": status}))
    if record:
        write_record(
            run_dir,
            RunRecord(
                status=status,
                initial_val_loss=5.5,
                final_val_loss=None if loss is None else loss + 0.1,
                divergence={"step": 90 if kind else None, "kind": kind},
                spike_count=spikes,
                lr=lr,
                seed=seed,
                grad_norm_median=1.0,
                grad_norm_max=9.0,
                grad_norm_max_after_warmup=2.0,
                steps=100,
                heldout=heldout(loss),
                training={"warmup_steps": 10},
            ),
        )
    return run_dir


@pytest.fixture
def toy_runs(tmp_path):
    """b (the suite's first variant, the reference) and a, 3 seeds at 2 LRs. a is better at its best LR by
    0.30 ± 0.01 on every seed; b blew up at 1e-2 on every seed."""
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root, "a", 1e-3, seed, 2.6 + seed / 10, index=1)
        write_run(
            root,
            "a",
            1e-2,
            seed,
            2.0 + seed / 10 + (0.01 if seed == 1 else 0),
            index=1,
            spikes=1,
            layers={"block_00": 0.2, "block_01": 0.1, "embeddings": 0.05},
        )
        write_run(root, "b", 1e-3, seed, 2.3 + seed / 10, index=0)
        write_run(root, "b", 1e-2, seed, 1.0, status="diverged", kind="nonfinite", index=0)  # blew up after val
    write_run(root, "a", 1e-2, 0, 0.1, name=run_version(1e-2, 0) + ".interrupted-20240101-000000")  # moved aside
    write_run(root, "a", 3e-2, 0, None, marker=FAILED_MARKER, record=False, index=1)
    (root / "toy" / "suite.yaml").write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "lrs": [1e-3, 1e-2],
                "seeds": [0, 1, 2],
                "reference": "b",
                "variants": [{"name": "b"}, {"name": "a"}],
                "claims": [
                    {"lower_loss": ["a", "b"], "text": "a beats b"},
                    {"fewer_divergences": ["a", "b"]},
                    {"lower_sensitivity": ["b", "a"]},
                ],
            }
        )
    )
    (root / "toy" / "base.yaml").write_text("model: {}\n")
    return root


def test_runs_are_read_from_their_records_and_moved_aside_ones_skipped(toy_runs):
    paths = find_runs(toy_runs)
    assert len(paths) == 13 and not any(".interrupted-" in str(p) for p in paths)
    row = load_run(toy_runs / "toy" / "a" / "lr1e-2-seed1", toy_runs)
    assert (row["suite"], row["variant"], row["lr"], row["seed"], row["status"]) == ("toy", "a", 1e-2, 1, "finished")
    assert row["heldout_loss"] == pytest.approx(2.11) and row["final_val_loss"] == pytest.approx(2.21)
    assert row["grad_norm_max_after_warmup"] == 2.0 and row["warmup_steps"] == 10 and row["spike_count"] == 1
    assert row["init/grad_norm/block_00"] == pytest.approx(0.2), "the step-0 value, not a later one"
    assert [s for s, _ in row["val_curve"]] == [0, 100]
    failed = load_run(toy_runs / "toy" / "a" / "lr3e-2-seed0", toy_runs)
    assert failed["status"] == "failed" and failed["source"] == "markers" and "heldout_loss" not in failed
    blew_up = load_run(toy_runs / "toy" / "b" / "lr1e-2-seed0", toy_runs)
    assert (blew_up["status"], blew_up["divergence_kind"], blew_up["divergence_step"]) == ("diverged", "nonfinite", 90)


def test_paired_comparison_with_the_reference_by_hand(toy_runs):
    runs = load_runs(toy_runs)
    assert compare.scored_loss_column(runs) == "heldout_loss"
    variants = compare.build_variants(runs, reference="b")
    assert [v.name for v in variants] == ["b", "a"], "suite order"
    b, a = variants
    assert b.is_reference and b.best_lr == 1e-3 and a.best_lr == 1e-2
    # b at 1e-2 blew up (non-finite): capped at the loss at init, whatever its last validation said
    assert b.capped.loc[1e-2].tolist() == [5.5, 5.5, 5.5]
    difference = a.comparison.at_best  # a@1e-2 - b@1e-3 per seed: -0.30, -0.29, -0.30
    assert difference.differences == pytest.approx((-0.3, -0.29, -0.3)) and difference.n == 3
    assert difference.verdict == "better" and difference.high < 0
    assert a.comparison.divergence_p[1e-2] == pytest.approx(0.1)  # 0/3 vs 3/3, Fisher two-sided
    frame = compare.variant_table(variants)
    assert list(frame["variant"]) == ["b", "a"] and frame.loc[0, "vs_reference"] == "reference"
    assert frame.loc[1, "vs_reference"].startswith("better: −0.297 [")
    assert frame.loc[1, "spikes"] == 3 and frame.loc[1, "diverged_per_lr"] == "1e-3: 0/3 · 1e-2: 0/3"
    assert frame.loc[0, "diverged_per_lr"] == "1e-3: 0/3 · 1e-2: 3/3"
    assert frame.loc[1, "flags"] == "optimum not bracketed: extend lrs above 1e-2"
    assert frame.loc[0, "flags"] == "optimum not bracketed: extend lrs below 1e-3"


def test_compare_writes_the_report_with_claims_from_the_suite(toy_runs, tmp_path, capsys):
    out = tmp_path / "out"
    suite = toy_runs / "toy" / "suite.yaml"
    assert compare_main([str(toy_runs / "toy"), "--out", str(out), "--suite", str(suite)]) == 0
    printed = capsys.readouterr().out
    markdown = (out / "comparison.md").read_text()
    assert "Reference variant: **b**; scored on the held-out loss." in markdown and "## Claims" in markdown
    verdict = "- **a** vs b, each seed at the best LRs of the other seeds: **better**, difference −0.297 ["
    assert markdown.index(verdict) < markdown.index("| variant | runs |") < markdown.index("## Claims")
    # Both optima sit at the toy grid's edges (a at 1e-2, its highest; b at 1e-3, its lowest): the claims that
    # rest on a best LR are not judged (issue 55), their figures still shown.
    edges = "a's optimum at the grid's highest LR (1e-2); extend the grid above"
    assert f"| lower_loss: a vs b | a beats b | **not judged: {edges}; b's optimum at the grid's lowest LR" in markdown
    assert "a − b = −0.297 [" in markdown
    assert "| lower_sensitivity: b vs a |  | **not judged: b's optimum at the grid's lowest LR (1e-3)" in markdown
    assert (
        "| fewer_divergences: a vs b |  | **not detected** | failed (stuck, regressed or blew up) a 0/6, b 3/6"
        in markdown
    )
    assert "| 0.25 | n/a (McNemar is exact) | 0.25 |  |" in markdown, "exact McNemar p, Holm over the three claims"
    assert "| b | 1e-2 | 3 | 5.500 ± 0.000 | reference | 3/3 [29 %, 100 %] | none |" in markdown  # apart
    assert '**not detected**: it\n  contains 0 — which is not "no difference"' in markdown
    assert "a: left out lr3e-2-seed0 (failed)" in markdown
    assert "| a | 1e-2 ←best | 3 |" in markdown and "## At initialisation" in markdown
    assert "## A/A calibration" not in markdown  # b and a are different configurations
    assert "| a | 6 | 0.050 | 0.200 | 0.100 | 2.00 |" in markdown  # averaged over the runs that logged it
    claims = pd.read_csv(out / "claims.csv")
    assert [outcome.split(":")[0] for outcome in claims["outcome"]] == [
        "**not judged",
        "**not detected**",
        "**not judged",
    ]
    for name in ("loss_curves.png", "loss_vs_lr.png", "grad_norm_init.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| a | 6 | 3 |" in printed and str(out / "comparison.md") in printed
    # runs.csv is enough to redo the statistics: the same variant table from it
    again = read_runs_csv(out / "runs.csv")
    assert len(again) == 13
    pd.testing.assert_frame_equal(
        compare.variant_table(compare.build_variants(again, "b")),
        compare.variant_table(compare.build_variants(load_runs(toy_runs), "b")),
    )


def test_older_records_without_heldout_are_scored_on_the_in_training_loss(tmp_path):
    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root, "a", 1e-3, seed, 2.0 + seed)
    for path in root.glob("toy/a/*/summary.json"):
        data = json.loads(path.read_text())
        data.update(schema=1, heldout=None)
        path.write_text(json.dumps(data))
    runs = load_runs(root)
    assert compare.scored_loss_column(runs) == "final_val_loss"
    assert "predate the held-out evaluation" in report.legend("final_val_loss")


def _drop_heldout(run_dir: Path) -> None:
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "heldout": None}))


def test_a_run_without_a_heldout_score_is_set_aside_and_named_while_the_rest_are_compared(tmp_path, capsys):
    """One run fitted with ``--heldout.enabled false`` beside scored ones: the comparison still scores the
    held-out loss (it does not switch every run to another quantity), and the notes name the run set aside."""
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root, "a", 1e-3, seed, 2.0 + seed / 10, index=0)
        write_run(root, "b", 1e-3, seed, 2.2 + seed / 10, index=1)
    _drop_heldout(root / "toy" / "b" / run_version(1e-3, 2))
    runs = load_runs(root)
    assert runs.loc[runs["path"].str.endswith(run_version(1e-3, 2)) & (runs["variant"] == "b"), "status"].tolist() == [
        "no held-out score"
    ]
    assert compare.scored_loss_column(runs) == "heldout_loss"
    out = tmp_path / "out"
    assert compare_main([str(root), "--out", str(out), "--no-tensorboard"]) == 0
    text = (
        (out / "toy" / "comparison.md").read_text() if (out / "toy").is_dir() else (out / "comparison.md").read_text()
    )
    assert f"b: left out {run_version(1e-3, 2)} (no held-out score)" in text
    (b,) = [v for v in compare.build_variants(runs, "a") if v.name == "b"]
    assert sorted(b.rows["seed"]) == [0, 1] and b.comparison.cross_fitted.n == 2


def test_a_finished_run_with_no_score_at_all_is_refused_by_name(tmp_path, capsys):
    """Neither a held-out nor an in-training loss: counting it at its loss at init would call it diverged."""
    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root, "a", 1e-3, seed, 2.0 + seed)
    bad = root / "toy" / "a" / run_version(1e-3, 1)
    for run_dir in root.glob("toy/a/*"):
        _drop_heldout(run_dir)
    data = json.loads((bad / "summary.json").read_text())
    (bad / "summary.json").write_text(json.dumps({**data, "final_val_loss": None}))
    assert compare_main([str(root), "--out", str(tmp_path / "out"), "--no-tensorboard"]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and "no final val loss to score" in error


def test_a_suite_file_moved_after_its_sweep_does_not_stop_the_comparison(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in range(2):
        run_dir = write_run(root, "a", 1e-3, seed, 2.0 + seed / 10)
        marker = json.loads((run_dir / START_MARKER).read_text())
        (run_dir / START_MARKER).write_text(json.dumps({**marker, "suite_file": str(tmp_path / "moved.yaml")}))
    assert compare_main([str(root), "--out", str(tmp_path / "out"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert f"the suite file {tmp_path / 'moved.yaml'} that the sweep recorded is gone" in err and "--suite" in err


def test_each_run_carries_its_precision_and_machine_into_runs_csv(tmp_path):
    root = tmp_path / "runs"
    run_dir = write_run(root, "a", 1e-3, 0, 2.0)
    data = json.loads((run_dir / "summary.json").read_text())
    machine = {"precision": "bf16-mixed", "device": "cpu", "kind": "Xeon +bf16", "cpu": "Xeon", "bf16_flags": []}
    (run_dir / "summary.json").write_text(json.dumps({**data, "machine": machine}))
    runs = load_runs(root)
    assert runs.loc[0, "precision"] == "bf16-mixed" and runs.loc[0, "machine"] == "Xeon +bf16"
    outputs.write_outputs(runs, tmp_path / "out", None, (), None)
    (csv,) = (tmp_path / "out").rglob("runs.csv")
    again = read_runs_csv(csv)
    assert again.loc[0, "precision"] == "bf16-mixed" and again.loc[0, "machine"] == "Xeon +bf16"


def test_runs_csv_says_which_runs_compiled_where_some_did_and_the_sweep_reads_it(tmp_path):
    """A compiled bf16 step does not rerun an eager one to the bit, so a committed table must say which its runs
    were: andrea sweep --from-table keeps the rung on it (speed_path.Tabled). Eager suites keep their columns."""
    from andrea_lab.experiments.sweep.from_table import read_table

    root = tmp_path / "runs"
    for seed, compiled in ((0, False), (1, True)):
        run_dir = write_run(root, "a", 1e-3, seed, 2.0 + seed / 10)
        (run_dir / "config.yaml").write_text(f"model:\n  compile: {str(compiled).lower()}\n")
    runs = load_runs(root)
    assert sorted(zip(runs["seed"], runs["compiled"])) == [(0, 0), (1, 1)]
    write_runs_csv(runs, tmp_path / "runs.csv")
    assert read_runs_csv(tmp_path / "runs.csv")["compiled"].tolist() == [0, 1]
    suite_file = tmp_path / "toy.yaml"
    suite_file.write_text("base: base.yaml\nlrs: [1e-3]\nseeds: [0, 1]\nvariants:\n  - name: a\n")
    (tmp_path / "base.yaml").write_text("trainer: {max_steps: 1}\n")
    table = read_table(tmp_path / "runs.csv", load_suite(suite_file))
    assert sorted(run.compiled for run in table.runs.values()) == [False, True]
    eager = runs[runs["compiled"] == 0]
    write_runs_csv(eager, tmp_path / "eager.csv")
    assert "compiled" not in read_runs_csv(tmp_path / "eager.csv").columns


def test_numbers_written_two_ways_are_one_setting_when_naming_variants():
    from andrea_lab.experiments.compare.config_variants import name_by_differences

    same = [{"trainer.limit_val_batches": 8}, {"trainer.limit_val_batches": 8.0}]
    assert name_by_differences(same) == ["", ""]
    assert name_by_differences([{"x": True}, {"x": 1}]) == ["x=True", "x=1"]
    assert name_by_differences([{"heldout.enabled": True}, {"heldout.enabled": False}]) == ["", ""]


def test_compare_errors_name_the_problem(tmp_path, toy_runs, capsys):
    assert compare_main([str(tmp_path / "nope")]) == 2
    assert "neither a directory of runs nor a runs.csv" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert compare_main([str(tmp_path / "empty")]) == 2
    assert "no runs under" in capsys.readouterr().err
    assert compare_main([str(toy_runs / "toy"), "--reference", "zeta", "--out", str(tmp_path / "o")]) == 2
    assert "reference variant 'zeta' has no runs here; pass --reference with one of: b, a" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_generated_blocks_replace_only_their_own_text():
    text = "# Results\n\nprose\n"
    once = doc_blocks.update_generated_block(text, "np", "claims", "| a |")
    assert doc_blocks.generated_blocks(once) == [("np", "claims", "| a |")]
    twice = doc_blocks.update_generated_block(once.replace("prose", "edited prose"), "np", "claims", "| b |")
    assert "edited prose" in twice and doc_blocks.generated_blocks(twice) == [("np", "claims", "| b |")]


def test_every_generated_block_in_results_md_is_regenerated_from_the_committed_runs(committed_project, tmp_path):
    """Every generated block of docs/results.md (claims, by scale where a suite has a scale axis; A/A
    calibration), regenerated from docs/results/<suite>/runs.csv and the suite file, byte for byte: no number
    in them is typed by hand. And every committed suite table has its blocks there, so none is left stale or
    missing."""
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    blocks = doc_blocks.generated_blocks(text)
    assert blocks, "docs/results.md has generated blocks"
    expected = {}
    for runs_csv in sorted((REPO / "docs" / "results").glob("*/runs.csv")):
        suite = load_suite(REPO / "experiments" / "suites" / f"{runs_csv.parent.name}.yaml")
        runs = search_budgets.with_recorded_edges(read_runs_csv(runs_csv), runs_csv)  # a search's edges: not judged
        for what, content in outputs.doc_blocks(runs, suite.claims, suite.identical_variants()).items():
            expected[(runs_csv.parent.name, what)] = content
        if (table := domains.domain_block(suite, runs)) is not None:  # a suite on two corpora: verdict x domain
            expected[(runs_csv.parent.name, "domains")] = table
        if (table := speedups.speedup_block(suite, runs, scale_parameters(suite))) is not None:  # sizes x budgets
            expected[(runs_csv.parent.name, "speedups")] = table
        if suite.ladder is not None:  # a ladder: its summary (which opens the document) and decisions table
            for what, content in ladder_blocks(suite, runs, tmp_path / runs_csv.parent.name).items():
                expected[(runs_csv.parent.name, what)] = content
    expected[(PROJECT, "claims")] = project_block(committed_project)
    expected[(PROJECT, "domains")] = domains.project_domain_block(committed_project)
    for suite, what, content in blocks:
        assert (suite, what) in expected, f"{suite} {what}: a block no committed runs.csv and suite generate"
        assert expected[(suite, what)] == content, f"{suite} {what}: rerun andrea compare --doc docs/results.md"
    assert sorted(expected) == sorted((suite, what) for suite, what, _ in blocks), "a suite's block is missing"


def test_every_probe_metric_reaches_the_runs_frame_and_a_column_is_one_line(tmp_path):
    """Step-0 values of any probe metric become ``init/<name>/<key>`` columns; showing one in the
    initialisation table is one Column over the variant's init profile."""
    from andrea_lab.fit.stability import probe

    run_dir = write_run(tmp_path / "runs", "a", 1e-3, 0, 2.0, layers={"block_00": 0.2})
    writer = SummaryWriter(str(run_dir))
    for step, value in ((0, 3.0), (50, 30.0)):
        writer.add_scalar(f"{probe.attn_logit_max.tag}/block_00", value, step)
        writer.add_scalar(f"{probe.attn_logit_max.tag}/block_01", value + 1, step)
    writer.add_scalar("stability/spikes", 1.0, 0)  # a per-step scalar, not a probe metric: no init column
    writer.close()
    row = load_run(run_dir, tmp_path / "runs")
    assert row["init/attn_logit_max/block_00"] == 3.0 and "init/spikes" not in row
    column = compare.Column(
        "attn_logit_max",
        "max attention logit: mean (max)",
        lambda vp: report.mean_max(report.per_block(vp[1], probe.attn_logit_max)),
    )
    frame = pd.DataFrame([row])
    variant = compare.Variant("a", frame, pd.DataFrame(), None, 1e-3)
    assert compare.table([column], [(variant, report.init_profile(frame))])["attn_logit_max"][0] == "3.500 (4.000)"


def write_fit(experiment_dir: Path, version: int, loss: float, seed: int = 1337, **model_config) -> Path:
    """A run as a plain `andrea fit` leaves it: no sweep markers, its resolved config.yaml beside summary.json."""
    run_dir = experiment_dir / f"version_{version}"
    run_dir.mkdir(parents=True)
    config = {"norm_placement": "andrea-lab:pre", "activation": "andrea-lab:gelu", "d_model": 128, **model_config}
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "seed_everything": seed,
                "model": {"lr": 0.002, "config": config},
                "trainer": {"max_steps": 200, "logger": {"init_args": {"version": version}}},
            }
        )
    )
    write_record(
        run_dir,
        RunRecord(
            status="finished",
            initial_val_loss=9.0,
            final_val_loss=loss,
            lr=0.002,
            seed=seed,
            steps=200,
            heldout=heldout(loss),
            config=config,
        ),
    )
    return run_dir


def test_adhoc_fits_of_one_experiment_are_variants_named_by_what_differs(tmp_path, capsys):
    """The README's sequence: the quickstart, then the same with an override, then once more unchanged."""
    experiment = tmp_path / "runs" / "quickstart"
    write_fit(experiment, 0, 5.7)
    write_fit(experiment, 1, 5.9, activation="andrea-lab:swiglu", norm_placement="andrea-lab:post")
    write_fit(experiment, 2, 5.6)  # the quickstart again: it replaces version_0
    for version in range(3, 11):  # version_10 is newer than version_9, and version_3.. are other seeds
        write_fit(experiment, version, 5.5, seed=version)
    runs = load_runs(experiment)
    named = dict(zip(runs["path"].map(lambda p: Path(p).name), runs["variant"]))
    assert named["version_0"] == named["version_2"] == named["version_10"] == "activation=gelu, norm_placement=pre"
    assert named["version_1"] == "activation=swiglu, norm_placement=post"
    assert list(runs["path"].map(lambda p: Path(p).name))[:3] == ["version_0", "version_1", "version_2"]
    assert runs.set_index(runs["path"].map(lambda p: Path(p).name)).at["version_0", "status"] == "superseded"
    assert compare_main([str(experiment)]) == 0
    markdown = (experiment / "compare" / "comparison.md").read_text()
    assert markdown.startswith("# Comparison: quickstart\n")
    assert "Reference variant: **activation=gelu, norm_placement=pre**" in markdown
    assert "- **activation=swiglu, norm_placement=post** vs activation=gelu, norm_placement=pre" in markdown
    assert "left out version_0 (superseded by version_2: the same variant, LR and seed, trained again)" in markdown
    assert "np." not in capsys.readouterr().out


def test_a_variant_named_in_the_config_keeps_its_name(tmp_path):
    experiment = tmp_path / "runs" / "quickstart"
    write_fit(experiment, 0, 5.7)
    run_dir = write_fit(experiment, 1, 5.9, activation="andrea-lab:swiglu")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "summary": {"variant": "swiglu"}}))
    assert list(load_runs(experiment)["variant"]) == ["quickstart", "swiglu"]  # the unnamed one: its experiment


def test_a_refusal_names_the_runs_plainly_and_leaves_no_folder(toy_runs, tmp_path, capsys):
    runs = load_runs(toy_runs)
    twice = pd.concat([runs, runs[runs["variant"] == "a"].head(1).assign(path="elsewhere")])
    with pytest.raises(ValueError, match=r"more than one finished run of a at LR 0.01, seed 0: keep one run"):
        outputs.write_outputs(twice, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def confirm_runs_csv(path: Path) -> Path:
    """A runs.csv as the norm_placement_confirm sweep will leave it: 4 variants x 2 LRs x seeds 5-14, the
    stuck window at step 100 for all; post sticks at 4e-3 on every seed and at 2e-3 on seeds 5-7."""
    rows = []
    for variant, base in (("pre", 2.15), ("post", 2.40), ("post-nowarmup", 2.30), ("post-warmup100", 2.25)):
        for lr in (2e-3, 4e-3):
            for seed in range(5, 15):
                stuck = variant == "post" and (lr == 4e-3 or seed < 8)
                rows.append(
                    dict(
                        suite="norm_placement_confirm",
                        variant=variant,
                        lr=lr,
                        seed=seed,
                        status="diverged" if stuck else "finished",
                        initial_val_loss=5.5,
                        final_val_loss=3.1 if stuck else base + seed / 1000,
                        divergence_kind="stuck_at_unigram" if stuck else None,
                        heldout_loss=3.07 if stuck else base + seed / 1000 + lr,
                        warmup_steps={"post-nowarmup": 0, "post-warmup100": 100}.get(variant, 40),
                        stuck_after=100,
                        path=f"runs/norm_placement_confirm/{variant}/lr{lr}-seed{seed}",
                    )
                )
    frame = pd.DataFrame(rows)
    frame.to_csv(path, index=False)
    return path


def test_the_confirmatory_suite_compares_at_its_fixed_lrs_into_its_own_block(tmp_path, capsys):
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nprose\n")
    runs_csv = confirm_runs_csv(tmp_path / "runs.csv")
    suite = REPO / "experiments" / "suites" / "norm_placement_confirm.yaml"
    assert compare_main([str(runs_csv), "--suite", str(suite), "--out", str(tmp_path / "out"), "--doc", str(doc)]) == 0
    assert "updated the norm_placement_confirm claims block(s)" in capsys.readouterr().out
    [(name, what, content)] = doc_blocks.generated_blocks(doc.read_text())
    assert (name, what) == ("norm_placement_confirm", "claims")
    assert content.startswith(
        "80 runs: seeds 5, 6, 7, 8, 9, 10, 11, 12, 13, 14; LRs 2e-3, 4e-3; scored on the "
        "held-out loss.\nVerdicts at Holm-adjusted p < 0.05 over this suite's 10 claims (4 "
        "exploratory claims judged on the raw p, outside the family)"
    )
    assert "Stuck-at-unigram window: from step 100 for every variant." in content
    rows = [line for line in content.splitlines() if line.startswith("| lower_") or line.startswith("| fewer_")]
    assert len(rows) == 14 and all("(fixed in advance)" in row for row in rows)
    assert (
        "| fewer_divergences: pre vs post @ 4e-3 | pre-norm diverges in fewer runs than post-norm | **reproduced** "
        "| failed (stuck, regressed or blew up) pre 0/10, post 10/10 paired by seed;"
    ) in content
    trained = next(row for row in rows if row.startswith("| lower_loss_trained: pre vs post @ 2e-3 (exploratory)"))
    assert "n=7 at LR 2e-3 (fixed in advance); 3 of 10 pairs left out (a run diverged)" in trained
    assert "| exploratory |" in trained
    # what a reader of the block checks against the suite: the family is the suite's, byte for byte again
    assert report.doc_blocks(read_runs_csv(runs_csv), load_suite(suite).claims)["claims"] == content


def test_the_aa_suite_writes_its_calibration_beside_its_claims(tmp_path):
    doc = tmp_path / "doc.md"
    assert (
        compare_main(
            [
                str(REPO / "tests" / "experiments" / "compare" / "data" / "runs-2026-12-01" / "aa.csv"),
                "--suite",
                str(REPO / "experiments" / "suites" / "aa.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--doc",
                str(doc),
            ]
        )
        == 0
    )
    assert [what for _, what, _ in doc_blocks.generated_blocks(doc.read_text())] == ["claims", "aa_calibration"]
    markdown = (tmp_path / "out" / "comparison.md").read_text()
    assert (
        "## A/A calibration" in markdown
        and "| best LR chosen in-sample (secondary) | 126 | 11 | 8.7 % | 5 % |" in markdown
    )


def test_the_stuck_window_of_a_run_comes_from_its_config(tmp_path):
    run_dir = write_run(tmp_path / "runs", "a", 1e-3, 0, 2.0)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"stability": {"stuck_after": 100}, "model": {"lr": 1e-3}}))
    assert load_run(run_dir, tmp_path / "runs")["stuck_after"] == 100
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"stability": {"stuck_after": None}}))
    assert load_run(run_dir, tmp_path / "runs")["stuck_after"] is None  # the window is the run's warmup


def test_a_sweep_still_running_gets_an_interim_report_without_its_claims(toy_runs, tmp_path, capsys):
    """b has not reached 1e-2 yet: the grid claims are refused, pointing at --no-claims, which reports the rest."""
    shutil.rmtree(toy_runs / "toy" / "b" / run_version(1e-2, 0))
    shutil.rmtree(toy_runs / "toy" / "b" / run_version(1e-2, 1))
    shutil.rmtree(toy_runs / "toy" / "b" / run_version(1e-2, 2))
    suite = str(toy_runs / "toy" / "suite.yaml")
    assert compare_main([str(toy_runs / "toy"), "--out", str(tmp_path / "o"), "--suite", suite]) == 2
    assert "`--no-claims` gives an interim report" in capsys.readouterr().err
    out = tmp_path / "interim"
    argv = [str(toy_runs / "toy"), "--out", str(out), "--suite", suite, "--no-claims", "--no-tensorboard"]
    assert compare_main(argv) == 0
    assert "## Claims" not in (out / "comparison.md").read_text() and not (out / "claims.csv").exists()
    assert compare_main([*argv[:-2], "--no-claims", "--doc", str(tmp_path / "r.md")]) == 2
    assert "cannot be combined with --no-claims" in capsys.readouterr().err


def test_a_refusal_of_many_duplicates_stays_one_short_line(toy_runs, tmp_path):
    """A handed table with thousands of duplicated cells: the error names five and counts the rest."""
    runs = load_runs(toy_runs)
    many = pd.concat([runs.assign(seed=seed) for seed in range(400)] * 2, ignore_index=True)
    with pytest.raises(ValueError) as refused:
        outputs.write_outputs(many, tmp_path / "out")
    message = str(refused.value)
    assert "more than one finished run of" in message and " more): keep one run" in message
    assert len(message) < 600 and "\n" not in message


def test_a_suites_cost_here_is_summed_from_its_runs_wall_times(tmp_path):
    """What a suite cost is measured, not estimated: each fit's wall time (summary.json) in runs.csv, summed in
    the report's notes; runs recorded without it add no column and no note."""
    root = tmp_path / "runs"
    for seed, seconds in ((0, 30.0), (1, 90.0)):
        run_dir = write_run(root, "a", 1e-3, seed, 2.0)
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        (run_dir / SUMMARY_FILE).write_text(json.dumps({**summary, "wall_time_s": seconds}))
    runs = load_runs(root / "toy")
    assert list(runs["wall_time_s"]) == [30.0, 90.0]
    assert report.cost_notes(runs) == [
        "cost here: 2 fits took 2.0 min of wall time in all (60 s per fit on average, 90 s the longest); a sweep "
        "at -j N takes about that divided by N, plus each run's start-up"
    ]
    csv_path = tmp_path / "runs.csv"
    write_runs_csv(runs, csv_path)
    assert list(read_runs_csv(csv_path)["wall_time_s"]) == [30.0, 90.0]
    untimed = load_runs(_toy_root_without_times(tmp_path))
    assert "wall_time_s" not in untimed or untimed["wall_time_s"].isna().all()
    assert report.cost_notes(untimed) == []


def _toy_root_without_times(tmp_path):
    root = tmp_path / "untimed"
    write_run(root, "a", 1e-3, 0, 2.0)
    return root / "toy"
