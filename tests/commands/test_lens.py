"""`andrea lens` on a real run: the held-out windows of the run's own evaluation, lens.json, TensorBoard, compare."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from andrea_lab.cli import main
from andrea_lab.commands.lens import TAG
from andrea_lab.experiments.compare.runs_table import load_run
from andrea_lab.inside.lens_loss import BLOCKS_TO_FINAL, LENS_FILE


@pytest.fixture(scope="module")
def lensed_run(trained_micro_run, tmp_path_factory):
    """A copy of the trained micro run (other tests read the original), after `andrea lens` on its last.ckpt."""
    run = tmp_path_factory.mktemp("lensed") / "version_0"
    shutil.copytree(trained_micro_run, run)
    assert main(["lens", "--ckpt", str(run / "checkpoints" / "last.ckpt")]) == 0
    return run


def test_the_last_blocks_loss_is_the_runs_held_out_loss(lensed_run):
    record = json.loads((lensed_run / LENS_FILE).read_text())
    summary = json.loads((lensed_run / "summary.json").read_text())
    layers = record["layers"]
    assert [layer["layer"] for layer in layers] == ["embed", "block 0", "block 1"]
    assert all(math.isfinite(layer["loss"]) for layer in layers)
    # the same windows as the end-of-fit held-out evaluation (heldout.max_tokens 4096 from config.yaml)
    assert record["heldout"]["tokens"] == summary["heldout"]["tokens"]
    assert layers[-1]["loss"] == pytest.approx(summary["heldout"]["loss"], abs=1e-4)
    assert layers[-1]["se"] == summary["heldout"]["se"]  # None: the pangram corpus is one document
    assert layers[0]["loss"] > layers[-1]["loss"]  # the embedding alone predicts worse than the whole model
    assert record[BLOCKS_TO_FINAL] in (0, 1, 2) and record["norm_placement"] == "andrea-lab:pre"


def test_tensorboard_text_and_image_and_the_compare_column(lensed_run, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(lensed_run), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    assert TAG in events.Tags()["images"] and any(TAG in tag for tag in events.Tags()["tensors"])
    assert (
        load_run(lensed_run, events=False)[BLOCKS_TO_FINAL]
        == json.loads((lensed_run / LENS_FILE).read_text())[BLOCKS_TO_FINAL]
    )
    # a second lens replaces its event file instead of adding one
    before = sorted(p.name for p in lensed_run.glob("events.out.tfevents.*.lens"))
    assert main(["lens", "--ckpt", str(lensed_run / "checkpoints" / "last.ckpt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"][0]["layer"] == "embed"
    assert len(before) == 1 and len(list(lensed_run.glob("events.out.tfevents.*.lens"))) == 1


def test_a_checkpoint_outside_a_run_directory_gets_a_sibling_json(trained_micro_run, tmp_path, capsys):
    ckpt = tmp_path / "alone.ckpt"
    shutil.copy(trained_micro_run / "checkpoints" / "last.ckpt", ckpt)
    assert main(["lens", "--ckpt", str(ckpt), "--max_tokens", "256"]) == 0
    out = capsys.readouterr().out
    assert "within 0.1 nat of the final loss after" in out and "| embed |" in out
    record = json.loads((tmp_path / "alone.ckpt.lens.json").read_text())
    assert record["heldout"]["max_tokens"] == 256 and record["heldout"]["tokens"] == 256


def test_a_run_sized_to_its_length_is_lensed_on_its_own_windows_with_progress(trained_micro_run, tmp_path, capsys):
    """``heldout.max_tokens: null`` (sized to the run): the lens reads the budget the run recorded, so it
    scores the same windows; and it says how far it is while it runs."""
    import yaml

    run = tmp_path / "version_0"
    shutil.copytree(trained_micro_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["heldout"]["max_tokens"] = None
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert main(["lens", "--ckpt", str(run / "checkpoints" / "last.ckpt")]) == 0
    summary = json.loads((run / "summary.json").read_text())
    record = json.loads((run / LENS_FILE).read_text())
    assert summary["heldout"]["max_tokens"] == 4096 and record["heldout"]["tokens"] == summary["heldout"]["tokens"]
    assert record["layers"][-1]["loss"] == pytest.approx(summary["heldout"]["loss"], abs=1e-4)
    err = capsys.readouterr().err
    assert "lens over " in err and "batches (100 %)" in err
