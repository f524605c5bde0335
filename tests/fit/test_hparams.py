"""A run's knobs and results as TensorBoard hparams: flattened under their config keys, typed the way the
HParams dashboard filters and sorts them, and written as session summaries that TensorBoard's own parser
reads back (the end-to-end check against a running TensorBoard is
tests/experiments/compare/test_tensorboard_report.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from stability_helpers import fit
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata

from andrea_lab.fit import RunSummary
from andrea_lab.fit.hparams import flatten, hparam_value, run_hparams, run_metrics, session_summaries, trial_name
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import preset
from andrea_lab.runs.directory import HeldOut, RunRecord


def record(**changes) -> RunRecord:
    values = dict(
        status="finished",
        lr=3e-3,
        seed=7,
        final_val_loss=2.5,
        best_val_loss=2.4,
        initial_val_loss=5.5,
        steps=100,
        spike_count=1,
        grad_norm_max=3.0,
        heldout=HeldOut(2.6, 0.02, 4096, 12, 64, 100_000, True, "documents", 0),
        config={"d_model": 64, "bias": True, "mlp_ratio": None, "norm_placement": "andrea-lab:pre"},
        training={
            "lr": 3e-3,
            "warmup_steps": 40,
            "decay_steps": None,
            "betas": [0.9, 0.95],
            "compile": False,
            "_instantiator": "lightning.pytorch.cli.instantiate_module",
        },
        data={
            "corpus": "stdlib",
            "corpus_sha256": "abc",
            "tokenizer_sha256": "def",
            "python_version": "3.11.7",
            "train_tokens": 123,
        },
        plugins={
            "norm_placement": {
                "name": "pre",
                "distribution": "andrea-lab",
                "version": "0.1.0",
                "target": "andrea_lab.model.builtin.placements:PreNorm",
            },
            "activation": {"name": "my_module:Act", "distribution": None, "version": None, "target": "my_module:Act"},
        },
        versions={"torch": "2.5.0", "lightning": None},
    )
    values.update(changes)
    return RunRecord(**values)


def test_values_keep_the_types_tensorboard_filters_and_sorts_by():
    assert hparam_value(True) is True and hparam_value(False) is False
    assert hparam_value(3) == 3 and isinstance(hparam_value(3), int)
    assert hparam_value(2.5) == 2.5
    assert hparam_value(None) == "None"
    assert hparam_value(math.inf) == "inf" and hparam_value(math.nan) == "nan"
    assert hparam_value(torch.tensor(0.5)) == 0.5
    assert hparam_value((0.9, 0.95)) == "[0.9, 0.95]"
    assert hparam_value("32-true") == "32-true"


def test_nested_config_flattens_to_the_override_keys():
    assert flatten("model", {"config": {"d_model": 64, "bias": True}, "lr": 1e-3, "_instantiator": "x"}) == {
        "model.config.d_model": 64,
        "model.config.bias": True,
        "model.lr": 1e-3,
    }


def test_every_knob_is_named_by_its_config_key():
    trainer = {
        "max_steps": 100,
        "precision": "bf16-mixed",
        "gradient_clip_val": None,
        "accumulate_grad_batches": 4,
        "devices": 2,
    }
    data = {"batch_size": 32, "tokenizer": "byte"}
    hparams = run_hparams(record(), trainer, data, suite="norm_placement", variant="pre-nowarmup")
    assert hparams["Suite"] == "norm_placement" and hparams["Variant"] == "pre-nowarmup"
    assert hparams["Status"] == "finished" and hparams["seed"] == 7
    assert hparams["model.config.d_model"] == 64 and hparams["model.config.bias"] is True
    assert hparams["model.config.mlp_ratio"] == "None"
    assert hparams["model.warmup_steps"] == 40 and hparams["model.lr"] == 3e-3
    assert hparams["model.decay_steps"] == "None" and hparams["model.compile"] is False
    assert not any("_instantiator" in name for name in hparams)
    assert hparams["data.batch_size"] == 32 and hparams["data.tokenizer"] == "byte"
    assert hparams["data.corpus_sha256"] == "abc" and hparams["data.tokenizer_sha256"] == "def"
    assert "data.train_tokens" not in hparams, "a split size is an outcome of the corpus, not a knob"
    assert hparams["trainer.precision"] == "bf16-mixed" and hparams["trainer.accumulate_grad_batches"] == 4
    assert hparams["trainer.gradient_clip_val"] == "None" and hparams["trainer.devices"] == 2
    assert "plugins.norm_placement" not in hparams, "its name is model.config.norm_placement"
    assert hparams["plugins.norm_placement.distribution"] == "andrea-lab==0.1.0"
    assert hparams["plugins.activation.distribution"] == "None", "an import path has no distribution"
    assert hparams["versions.torch"] == "2.5.0" and hparams["versions.lightning"] == "None"
    assert all(isinstance(value, (bool, int, float, str)) for value in hparams.values())


def test_metrics_hold_the_heldout_loss_its_se_and_the_divergence_step():
    metrics = run_metrics(record())
    assert metrics["heldout/loss"] == 2.6 and metrics["heldout/loss_se"] == 0.02
    assert metrics["hparams/diverged"] == 0.0 and "hparams/divergence_step" not in metrics
    diverged = run_metrics(record(status="diverged", divergence={"step": 42, "kind": "nonfinite"}, heldout=None))
    assert diverged["hparams/diverged"] == 1.0 and diverged["hparams/divergence_step"] == 42.0
    assert "heldout/loss" not in diverged


def test_session_summaries_read_back_through_tensorboards_parser():
    start, end = session_summaries(
        {"model.lr": 3e-3, "model.compile": False, "Variant": "pre"}, "diverged", "tiny/pre/lr3e-3-seed0"
    )
    (value,) = start.value
    assert value.tag == metadata.SESSION_START_INFO_TAG
    info = metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
    assert info.hparams["model.lr"].number_value == 3e-3
    assert info.hparams["model.compile"].WhichOneof("kind") == "bool_value"
    assert info.hparams["Variant"].string_value == "pre"
    assert info.group_name == "tiny/pre/lr3e-3-seed0", "the dashboard's trial id says which run it is"
    (value,) = end.value
    assert value.tag == metadata.SESSION_END_INFO_TAG
    assert (
        metadata.parse_session_end_info_plugin_data(value.metadata.plugin_data.content).status == api_pb2.STATUS_FAILURE
    )
    for status, expected in (("finished", api_pb2.STATUS_SUCCESS), ("interrupted", api_pb2.STATUS_UNKNOWN)):
        (value,) = session_summaries({}, status)[1].value
        assert metadata.parse_session_end_info_plugin_data(value.metadata.plugin_data.content).status == expected
    assert not any(v.tag == metadata.EXPERIMENT_TAG for s in (start, end) for v in s.value), (
        "a run writes no experiment summary: TensorBoard derives it (and differs) from all runs"
    )


def test_trial_names_say_which_run_it_is():
    assert trial_name("runs/np/post/lr2e-3-seed1", suite="np") == "np/post/lr2e-3-seed1"
    assert trial_name("/abs/runs/quickstart/version_3", suite=None) == "quickstart/version_3"
    assert trial_name("runs/depth/d128/pre/lr1e-3-seed0", suite="depth") == "depth/d128/pre/lr1e-3-seed0"
    assert trial_name("runs/np/np/lr1e-3-seed0", suite="np") == "np/np/lr1e-3-seed0", "a variant named as its suite"


def test_a_resumed_run_shows_its_results_once_and_the_status_it_ended_with(tmp_path):
    """The interrupted segment wrote its results and an "interrupted" session; the resumed fit's summary
    replaces them: TensorBoard would otherwise draw every result twice and keep the first session it read."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from andrea_lab.fit.hparams import write_summary_events

    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")  # the run's own curves are not touched
    write_summary_events(tmp_path, {"model.lr": 3e-3}, {"heldout/loss": 5.0}, "interrupted", 3, "q/version_0")
    write_summary_events(tmp_path, {"model.lr": 3e-3}, {"heldout/loss": 4.0}, "finished", 6, "q/version_0")
    assert len(list(tmp_path.glob("events.out.tfevents.*.summary"))) == 1
    assert (tmp_path / "events.out.tfevents.1.host").exists()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("heldout/loss")] == [(6, 4.0)]
    content = events.SummaryMetadata(metadata.SESSION_END_INFO_TAG).plugin_data.content
    assert metadata.parse_session_end_info_plugin_data(content).status == api_pb2.STATUS_SUCCESS


def test_the_optimizer_the_schedule_and_each_of_their_options_are_knobs():
    training = {"optimizer": "muon", "schedule": "wsd", "optimizer_args": {"momentum": 0.9, "nesterov": False}}
    hparams = run_hparams(record(training={**training, "schedule_args": {"decay_fraction": 0.2}}), {}, {})
    assert hparams["model.optimizer"] == "muon" and hparams["model.schedule"] == "wsd"
    assert hparams["model.optimizer_args.momentum"] == 0.9 and hparams["model.optimizer_args.nesterov"] is False
    assert hparams["model.schedule_args.decay_fraction"] == 0.2


@pytest.mark.slow  # a real (2-step) fit
def test_a_runs_hparams_session_shows_its_optimizer_and_the_schedule_it_trained_with(tmp_path, text_corpus):
    module = AndreaLM(config=preset("andrea-micro", block_size=32), optimizer="muon", optimizer_args={"momentum": 0.9})
    summary = RunSummary()
    trainer = fit(tmp_path, text_corpus, [summary], max_steps=2, module=module)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    content = events.PluginTagToContent("hparams")[metadata.SESSION_START_INFO_TAG]
    start = metadata.parse_session_start_info_plugin_data(content).hparams
    assert start["model.optimizer"].string_value == "muon"
    assert start["model.schedule"].string_value == "warmup_cosine", "left unset: the optimizer's default, by name"
    assert start["model.optimizer_args.momentum"].number_value == 0.9
    assert json.loads(summary.path.read_text())["training"]["optimizer_args"] == {"momentum": 0.9}
