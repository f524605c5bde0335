"""TensorBoard, started in-process on a tiny real sweep, read through its own HTTP API: the HParams
dashboard holds every knob with its type and a right ``differs``, the session groups carry the results,
the custom-scalars layout is there, and ``andrea compare``'s report is a run of its own (texts and images).

The tiny sweep (andrea_lab/experiments/sweep/tiny_suite.py, which scripts/tensorboard_screenshots.py photographs) is the
commands ``andrea sweep`` plans (two variants x two learning rates x one seed, six steps each), each run in
this process through ``andrea fit``; at LR 3.0 both variants diverge."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from andrea_lab.cli import main as andrea
from andrea_lab.commands.compare import main as compare_main
from andrea_lab.experiments.compare.runs_table import find_runs
from andrea_lab.experiments.sweep.tiny_suite import train_tiny_suite, write_tiny_suite
from andrea_lab.fit.stability.monitor import CUSTOM_SCALARS_LAYOUT
from andrea_lab.runs.directory import COMPARISON_RUN

REPO = Path(__file__).resolve().parents[3]
STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory, text_corpus) -> Path:
    """``runs/`` after the tiny sweep: runs/tiny/{pre,post-nowarmup}/lr{1e-3,3e0}-seed0."""
    root = tmp_path_factory.mktemp("tb-sweep")
    suite = write_tiny_suite(root / "tiny.yaml", REPO / "experiments" / "cpu-base.yaml", text_corpus)
    seed = os.environ.get("PL_GLOBAL_SEED")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ANDREA_LAB_CACHE", str(root / "cache"))
        train_tiny_suite(suite, root / "runs")
    if seed is None:  # the fits' seed_everything leaves the last seed in the environment
        os.environ.pop("PL_GLOBAL_SEED", None)
    return root / "runs"


class Board:
    """A TensorBoard serving ``logdir`` in this process (loaded once, before it answers), and its HTTP API."""

    def __init__(self, logdir: Path):
        from tensorboard import program

        tensorboard = program.TensorBoard()
        tensorboard.configure(
            argv=[
                None,
                "--logdir",
                str(logdir),
                "--port",
                "0",
                "--host",
                "127.0.0.1",
                "--load_fast",
                "false",
                "--reload_task",
                "blocking",
                "--reload_interval",
                "0",
            ]
        )
        self.url = tensorboard.launch()

    def get(self, route: str, **query):
        with urllib.request.urlopen(self.url + route + ("?" + urllib.parse.urlencode(query) if query else "")) as r:
            body = r.read()
        return json.loads(body) if r.headers.get_content_type() == "application/json" else body

    def post(self, route: str, body: dict):
        request = urllib.request.Request(
            self.url + route, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request) as response:
            return json.load(response)

    def experiment(self) -> tuple[dict[str, dict], list[dict]]:
        """The hparams by name, and the metrics."""
        found = self.post("data/plugin/hparams/experiment", {"experimentName": ""})
        return {info["name"]: info for info in found["hparamInfos"]}, found["metricInfos"]

    def session_groups(self, *col_params: dict) -> list[dict]:
        return self.post(
            "data/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": STATUSES,
                "colParams": list(col_params),
                "startIndex": 0,
                "sliceSize": 100,
            },
        )["sessionGroups"]


@pytest.fixture(scope="module")
def board(sweep_runs) -> Board:
    assert compare_main([str(sweep_runs / "tiny"), "--out", str(sweep_runs.parent / "report")]) == 0
    return Board(sweep_runs)


@pytest.mark.slow
def test_every_knob_is_an_hparam_with_its_type_and_differs(board):
    hparams, metrics = board.experiment()
    types = {name: info["type"] for name, info in hparams.items()}
    assert types["model.warmup_steps"] == types["model.lr"] == types["trainer.max_steps"] == "DATA_TYPE_FLOAT64"
    assert types["model.config.norm_placement"] == types["Variant"] == types["Suite"] == "DATA_TYPE_STRING"
    assert types["trainer.precision"] == types["plugins.norm_placement.distribution"] == "DATA_TYPE_STRING"
    assert types["model.config.bias"] == types["model.compile"] == "DATA_TYPE_BOOL"
    for name in (
        "data.batch_size",
        "data.tokenizer",
        "data.corpus_sha256",
        "model.weight_decay",
        "model.min_lr_ratio",
        "trainer.gradient_clip_val",
        "trainer.accumulate_grad_batches",
        "trainer.devices",
        "seed",
        "versions.torch",
    ):
        assert name in hparams, name
    differing = {name for name, info in hparams.items() if info["differs"]}
    assert {"Variant", "model.lr", "model.warmup_steps", "model.config.norm_placement", "Status"} <= differing
    assert not differing & {"Suite", "seed", "model.config.d_model", "trainer.max_steps", "model.compile"}
    assert hparams["model.lr"]["domainInterval"] == {"minValue": 1e-3, "maxValue": 3.0}
    assert sorted(hparams["Variant"]["domainDiscrete"]) == ["post-nowarmup", "pre"]
    assert sorted(hparams["Status"]["domainDiscrete"]) == ["diverged", "finished"]
    tags = {metric["name"]["tag"] for metric in metrics}
    assert {"heldout/loss", "hparams/final_val_loss", "hparams/divergence_step", "hparams/diverged", "val/loss"} <= tags


@pytest.mark.slow
def test_session_groups_answer_which_variant_is_best_and_which_diverged(board):
    by_loss = board.session_groups(
        {"metric": {"tag": "heldout/loss"}, "order": "ORDER_ASC"},
        {"hparam": "model.lr", "filterInterval": {"minValue": 0, "maxValue": 0.01}},
    )
    assert len(by_loss) == 2 and {g["hparams"]["model.lr"] for g in by_loss} == {1e-3}
    losses = [next(m["value"] for m in g["metricValues"] if m["name"]["tag"] == "heldout/loss") for g in by_loss]
    assert losses == sorted(losses)
    records = {(g["hparams"]["Variant"], g["hparams"]["model.lr"]): g for g in board.session_groups()}
    assert len(records) == 4
    pre = records[("pre", 1e-3)]["hparams"]
    assert pre["model.warmup_steps"] == 2 and records[("post-nowarmup", 1e-3)]["hparams"]["model.warmup_steps"] == 0
    assert pre["model.compile"] is False and pre["Suite"] == "tiny" and pre["trainer.precision"] == "32-true"
    diverged = board.session_groups({"hparam": "Status", "filterDiscrete": ["diverged"]})
    assert {g["hparams"]["model.lr"] for g in diverged} == {3.0} and len(diverged) == 2
    for group in diverged:
        (session,) = group["sessions"]
        assert session["status"] == "STATUS_FAILURE"
        assert any(m["name"]["tag"] == "hparams/divergence_step" for m in session["metricValues"])


#: What TensorBoard's HParams table shows before any click (its frontend, tf-hparams-query-pane): the first
#: five hparams of the experiment that differ, in the backend's order (sorted by name), and its first five metrics.
SHOWN_BY_DEFAULT = 5


@pytest.mark.slow
def test_the_hparams_table_opens_on_the_heldout_loss_status_and_variant(board):
    found = board.post("data/plugin/hparams/experiment", {"experimentName": ""})
    shown = [info["name"] for info in found["hparamInfos"] if info["differs"]][:SHOWN_BY_DEFAULT]
    assert shown[:2] == ["Status", "Variant"]
    metrics = [metric["name"]["tag"] for metric in found["metricInfos"]][:SHOWN_BY_DEFAULT]
    # heldout/loss_se follows where it exists (not here: the tiny corpus's held-out split is one document)
    assert metrics[0] == "heldout/loss" and all(m.startswith(("heldout/", "hparams/")) for m in metrics)
    names = {group["name"] for group in board.session_groups()}
    assert names == {f"tiny/{v}/lr{lr}-seed0" for v in ("pre", "post-nowarmup") for lr in ("1e-3", "3e0")}


@pytest.mark.slow
def test_a_suite_directory_alone_gets_the_same_differs(sweep_runs, board):
    hparams, _ = Board(sweep_runs / "tiny").experiment()
    assert hparams["model.warmup_steps"]["differs"] and not hparams["model.config.d_model"]["differs"]


FLAGS = ("stability/nonfinite", "stability/diverged", "stability/stuck_at_unigram")


def check_flags(board: Board) -> None:
    """No custom-scalars chart draws a 0/1 flag (there a healthy run's flag read as 1: colour by run, smoothing);
    each flag is its own tag per run, 0 or 1, and the diverged flag of a run that diverged (both do at LR 3)
    ends at 1, of one that did not at 0."""
    layout = board.get("data/plugin/custom_scalars/layout")
    charts = [chart for category in layout["category"] for chart in category["chart"]]
    regexes = [tag for chart in charts for tag in chart["multiline"]["tag"]]
    assert not [(regex, flag) for regex in regexes for flag in FLAGS if re.fullmatch(regex, flag)]
    for run in (r for r in board.get("data/runs") if not r.endswith(COMPARISON_RUN)):
        for flag in FLAGS:
            points = board.get("data/plugin/scalars/scalars", run=run, tag=flag)
            assert points and {p[2] for p in points} <= {0.0, 1.0}, (run, flag)
        diverged = board.get("data/plugin/scalars/scalars", run=run, tag="stability/diverged")
        assert diverged[-1][2] == (1.0 if run.endswith("lr3e0-seed0") else 0.0), run


@pytest.mark.slow
def test_custom_scalars_layout_shows_the_per_layer_gradient_norms(board):
    layout = board.get("data/plugin/custom_scalars/layout")
    charts = {chart["title"]: chart for category in layout["category"] for chart in category["chart"]}
    for category in CUSTOM_SCALARS_LAYOUT.values():
        for title, (kind, regexes) in category.items():
            assert kind == "Multiline" and charts[title]["multiline"]["tag"] == regexes
    check_flags(board)
    runs = board.get("data/runs")
    tags = board.get("data/plugin/scalars/tags")
    assert any(tag.startswith("stability/grad_norm/block_") for tag in tags[runs[0]])


@pytest.mark.slow
def test_the_comparison_report_is_a_run_of_texts_and_images(board):
    run = f"tiny/{COMPARISON_RUN}"
    assert run in board.get("data/runs")
    text_tags = board.get("data/plugin/text/tags")[run]
    assert sorted(text_tags)[0].startswith("comparison/0_variants"), "the verdicts and variants come first"
    per_lr = next(tag for tag in text_tags if "_per_lr" in tag)
    (entry,) = board.get("data/plugin/text/text", run=run, tag=per_lr)
    assert "<table>" in entry["text"] and "post-nowarmup" in entry["text"] and "1e-3" in entry["text"]
    images = board.get("data/plugin/images/tags")[run]
    assert {"comparison/loss_curves", "comparison/loss_vs_lr"} <= set(images)
    (image,) = board.get("data/plugin/images/images", run=run, tag="comparison/loss_vs_lr")
    png = board.get("data/plugin/images/individualImage?" + image["query"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    _, metrics = board.experiment()
    assert not any(COMPARISON_RUN in metric["name"]["group"] for metric in metrics), "not an hparams session"


@pytest.mark.slow
def test_compare_replaces_its_run_skips_it_as_a_run_and_the_flag_turns_it_off(sweep_runs, tmp_path):
    runs = tmp_path / "tiny"
    shutil.copytree(sweep_runs / "tiny", runs, ignore=shutil.ignore_patterns(COMPARISON_RUN, "checkpoints"))
    assert compare_main([str(runs), "--no-tensorboard"]) == 0
    assert not (runs / COMPARISON_RUN).exists()
    assert compare_main([str(runs)]) == 0
    assert compare_main([str(runs)]) == 0
    assert len(list((runs / COMPARISON_RUN).glob("events.out.tfevents.*"))) == 1, "replaced, not appended to"
    assert not list(runs.glob(f"{COMPARISON_RUN}.*")), "no staging directory left"
    assert len(find_runs(runs)) == 4 and all(COMPARISON_RUN not in str(path) for path in find_runs(runs))
    (runs / COMPARISON_RUN / "notes.txt").write_text("mine")
    assert andrea(["compare", str(runs)]) == 2, "a directory holding files compare did not write is left alone"
    assert (runs / COMPARISON_RUN / "notes.txt").read_text() == "mine"
