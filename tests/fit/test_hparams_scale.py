"""The scale of a suite run (runs/<suite>/<scale>/<variant>/...) is an hparam, ``Scale``, read from the sweep's
start marker (what ``andrea compare`` reads it from): written to the run's event file and read back through
TensorBoard's own parser, so the HParams dashboard can filter by it. A run outside a scale axis has "None"."""

from __future__ import annotations

import json
from types import SimpleNamespace

from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import metadata

from andrea_lab.fit.hparams import SCALE, log_run_hparams
from andrea_lab.runs.directory import START_MARKER


def logged_hparams(save_dir, marker):
    """Log one run's hparams as the summary callback does at the end of a fit; the session's hparams read back."""
    logger = TensorBoardLogger(save_dir=str(save_dir), name="qk", version="lr1e-3-seed0", default_hp_metric=False)
    if marker is not None:
        (save_dir / "qk" / "lr1e-3-seed0").mkdir(parents=True)
        (save_dir / "qk" / "lr1e-3-seed0" / START_MARKER).write_text(json.dumps(marker))
    trainer = SimpleNamespace(logger=logger, loggers=[logger], default_root_dir=str(save_dir))
    log_run_hparams(trainer, {"Suite": "st", "Variant": "qk"}, {"heldout/loss": 2.0}, "finished", 3, "st/qk")
    (events,) = (save_dir / "qk" / "lr1e-3-seed0").glob("events.out.tfevents.*")
    for event in EventFileLoader(str(events)).Load():
        for value in event.summary.value:
            if value.tag == metadata.SESSION_START_INFO_TAG:
                return metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content).hparams
    raise AssertionError("no session start written")


def test_a_scaled_runs_scale_is_an_hparam_from_the_sweeps_marker(tmp_path):
    hparams = logged_hparams(
        tmp_path / "st" / "d64", {"suite": "st", "variant": "qk", "scale": "d64", "scale_index": 0}
    )
    assert hparams[SCALE].string_value == "d64"
    assert hparams["Suite"].string_value == "st" and hparams["Variant"].string_value == "qk"


def test_a_run_without_a_scale_axis_says_none(tmp_path):
    assert logged_hparams(tmp_path / "plain", {"suite": "st", "variant": "qk"})[SCALE].string_value == "None"
    assert logged_hparams(tmp_path / "fit", None)[SCALE].string_value == "None"  # a plain `andrea fit`
