"""RunSummary: summary.json (exact schema, atomic, also on interruption) and TensorBoard hparams metrics."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from andrea_testing import MICRO_OVERRIDES
from stability_helpers import fit
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from andrea_lab.fit import RunSummary, StabilityMonitor
from andrea_lab.fit.module import AndreaLM
from andrea_lab.fit.stability.events import Divergence
from andrea_lab.fit.summary import plugin_provenance, run_status
from andrea_lab.model.config import preset
from andrea_lab.runs.directory import RunRecord

REPO = Path(__file__).resolve().parents[2]
STEPS = 40
SUMMARY_KEYS = tuple(field.name for field in dataclasses.fields(RunRecord))


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, text_corpus) -> Path:
    """One short micro fit through the real `andrea` command, with the stability keys set from the command line."""
    workdir = tmp_path_factory.mktemp("summary-fit")
    env = {**os.environ, "ANDREA_LAB_CACHE": str(workdir / "cache")}
    args = [
        "fit",
        "--config",
        str(REPO / "experiments/quickstart.yaml"),
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(text_corpus),
        "--model.lr",
        "3e-3",
        "--model.warmup_steps",
        "5",
        "--trainer.max_steps",
        str(STEPS),
        "--trainer.val_check_interval",
        "20",
        "--stability.interval",
        "20",
        "--stability.flush_every",
        "5",
        "--heldout.max_tokens",
        "1024",
        "--heldout.at_steps",
        "[10, 30, 99]",  # 99: beyond max_steps, never comes
        "--data.val_fraction",
        "0.5",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, f"andrea fit failed:\n{result.stdout}\n{result.stderr}"
    return workdir / "runs" / "quickstart" / "version_0"


def events_of(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


@pytest.mark.slow
def test_summary_json_has_exactly_the_schema(cli_run):
    summary = json.loads((cli_run / "summary.json").read_text())
    assert tuple(summary) == SUMMARY_KEYS
    assert summary["schema"] == 2 and summary["status"] == "finished"
    machine = summary["machine"]  # what a comparison must keep equal between the runs of a claim
    assert (
        machine["precision"] == "32-true" and machine["device"] == "cpu" and machine["kind"].startswith(machine["cpu"])
    )
    assert set(machine["bf16_flags"]) <= {"amx_bf16", "amx_tile", "avx512_bf16", "avx512f"}
    assert isinstance(machine["threads"], int) and machine["threads"] >= 1  # bit-identity holds per thread count
    assert summary["experiment"] == "quickstart" and summary["version"] == 0
    assert summary["divergence"] == {"step": None, "kind": None}
    assert summary["steps"] == STEPS and summary["tokens_seen"] == STEPS * 8 * 64
    assert summary["lr"] == 3e-3 and summary["seed"] == 1337 and summary["data_seed"] == 1337
    assert isinstance(summary["spike_count"], int) and summary["wall_time_s"] > 0
    assert summary["initial_val_loss"] == pytest.approx(math.log(257), abs=0.3)
    assert 2.0 < summary["unigram_loss"] < math.log(257)
    assert summary["grad_norm_max"] >= summary["grad_norm_median"] > 0
    assert summary["config"]["d_model"] == 64 and summary["config"]["vocab_size"] == 257
    version = metadata.version("andrea-lab")
    assert summary["plugins"] == {
        "norm_placement": {
            "name": "pre",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.model.builtin.placements:PreNorm",
        },
        "activation": {
            "name": "gelu",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.model.builtin.activations:GELU",
        },
        "kernel_backend": {
            "name": "torch",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.model.builtin.backends:TorchBackend",
        },
        "norm": {
            "name": "layernorm",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.model.builtin.norms:LayerNorm",
        },
        "optimizer": {
            "name": "adamw",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.fit.optimizers.adamw:AdamW",
        },
        "schedule": {
            "name": "warmup_cosine",
            "distribution": "andrea-lab",
            "version": version,
            "target": "andrea_lab.fit.schedules:WarmupCosine",
        },
    }
    assert not [p for p in cli_run.iterdir() if p.name.endswith(".tmp")], "no temporary file left behind"
    # The keys are YAML config keys: the run's saved config has them.
    config = yaml.safe_load((cli_run / "config.yaml").read_text())
    assert config["stability"]["interval"] == 20 and config["stability"]["enabled"] is True
    assert config["heldout"]["max_tokens"] == 1024 and config["heldout"]["enabled"] is True


@pytest.mark.slow
def test_the_heldout_curve_is_scored_at_the_fixed_steps_on_the_final_windows(cli_run):
    """heldout.at_steps: the same windows as the final evaluation, after those optimizer steps, in summary.json
    and TensorBoard; the curve falls (the run learns between step 10 and 30 and the end)."""
    summary = json.loads((cli_run / "summary.json").read_text())
    curve = summary["heldout_curve"]
    assert [point["step"] for point in curve] == [10, 30]
    assert curve[0]["loss"] > curve[1]["loss"] > summary["heldout"]["loss"]
    assert all(point["se"] > 0 for point in curve)
    logged = [(e.step, e.value) for e in events_of(cli_run).Scalars("heldout/loss")]
    assert [step for step, _ in logged] == [10, 30, STEPS], "the curve, then the final score (HParams)"
    expected = [point["loss"] for point in curve] + [summary["heldout"]["loss"]]
    assert [value for _, value in logged] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("bad", ["[0]", "[10, -3]", "true", "[1.5]"])
def test_a_bad_heldout_step_is_one_line_before_any_run(tmp_path, text_corpus, bad):
    env = {**os.environ, "ANDREA_LAB_CACHE": str(tmp_path / "cache")}
    args = ["fit", "--config", str(REPO / "experiments/quickstart.yaml"), *MICRO_OVERRIDES]
    args += ["--data.corpus", str(text_corpus), "--heldout.at_steps", bad, "--trainer.max_steps", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *args], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert result.returncode == 2, result.stderr
    assert "heldout.at_steps" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_summary_records_the_heldout_loss_and_what_the_run_depends_on(cli_run, text_corpus):
    summary = json.loads((cli_run / "summary.json").read_text())
    heldout = summary["heldout"]
    # 1024 tokens = 16 windows of 64, drawn across the held-out documents (the split is larger: sampled).
    assert heldout["tokens"] == 1024 and heldout["windows"] == 16 and heldout["sampled"] is True
    assert heldout["se_unit"] == "documents" and heldout["documents"] >= 2
    assert 0 < heldout["se"] < 1 and abs(heldout["loss"] - summary["final_val_loss"]) < 1.0
    data = summary["data"]
    assert data["corpus"] == str(text_corpus) and len(data["corpus_sha256"]) == 64
    assert len(data["tokenizer_sha256"]) == 64 and data["python_version"] is None  # not the stdlib
    assert data["train_tokens"] > 0 and data["val_tokens"] == heldout["split_tokens"]
    assert data["train_documents"] + data["val_documents"] >= heldout["documents"]
    assert data["split_version"] == 2  # near-duplicate families on one side (andrea_lab.data.split)
    assert summary["versions"]["torch"] == torch.__version__ and summary["versions"]["andrea-lab"]
    assert summary["training"]["warmup_steps"] == 5 and summary["training"]["lr"] == 3e-3
    assert summary["grad_norm_max_after_warmup"] <= summary["grad_norm_max"]
    # the byte tokenizer: every scored token is one byte of text, so bits per byte is the loss over ln 2
    assert heldout["bytes"] == heldout["tokens"] and heldout["max_tokens"] == 1024
    assert heldout["bits_per_byte"] == pytest.approx(heldout["loss"] / math.log(2), rel=1e-9)
    # per document: names from the split, and the sums from which the token-weighted loss recomputes
    per = heldout["per_document"]
    assert set(per["names"]) <= {path.name for path in text_corpus.iterdir()} and sum(per["tokens"]) == 1024
    assert sum(per["loss_sums"]) / 1024 == pytest.approx(heldout["loss"], rel=1e-9)
    assert heldout["document_loss"] is not None and set(heldout["strata"]) <= {"code", "prose"}


def test_closing_lines_show_bits_per_byte_and_the_sample_before_the_next_steps(tmp_path):
    from andrea_lab.fit.summary import closing_lines
    from andrea_lab.runs.directory import HeldOut, RunRecord

    heldout = HeldOut(4.2, 0.1, 1000, 9, 20, 5000, True, "documents", 0, bytes=3900, bits_per_byte=1.553)
    record = RunRecord(status="finished", initial_val_loss=9.0, steps=600, heldout=heldout)
    text = closing_lines(record, tmp_path / "v0", tmp_path / "v0" / "summary.json", sample="def f(x):\n    return x")
    lines = text.splitlines()
    assert "held-out loss (token-weighted) 4.200 ± 0.100" in lines[1], "a record without the document-weighted score"
    assert lines[1].endswith("= 1.553 bits per byte of text")
    assert lines[3].startswith("sample ('def ' continued") and lines[4:6] == ["    | def f(x):", "    |     return x"]
    assert lines[6].startswith("next: ")
    assert "sample" not in closing_lines(record, tmp_path / "v0", tmp_path / "v0" / "summary.json")
    both = dataclasses.replace(record, heldout=dataclasses.replace(heldout, document_loss=4.25, document_se=0.12))
    line = closing_lines(both, tmp_path / "v0", tmp_path / "v0" / "summary.json").splitlines()[1]
    assert "held-out loss (document-weighted) 4.250 ± 0.120, token-weighted 4.200 ± 0.100 (SE over 9" in line, line


def test_a_heldout_budget_left_unset_is_sized_to_the_run():
    from types import SimpleNamespace

    from andrea_lab.fit.heldout import sized_to_run

    data = SimpleNamespace(batch_size=16, block_size=128)

    def trainer(steps, accumulate=1, world=1):
        return SimpleNamespace(global_step=steps, accumulate_grad_batches=accumulate, world_size=world)

    assert sized_to_run(trainer(600), data) == 600 * 16 * 128 // 4
    assert sized_to_run(trainer(300, accumulate=2), data) == sized_to_run(trainer(150, world=4), data) == 600 * 512
    assert sized_to_run(trainer(2), data) == 16_384  # a short fit is not dominated by its evaluation
    assert sized_to_run(trainer(10**6), data) == 2_097_152


@pytest.mark.slow
def test_validate_writes_its_own_heldout_record(cli_run, text_corpus):
    """`andrea validate` of the run's checkpoint scores the same held-out windows as the fit's end, and
    writes its record into that run: no new version beside it, no config.yaml of its own."""
    env = {**os.environ, "ANDREA_LAB_CACHE": str(cli_run.parents[2] / "cache")}
    args = [
        "validate",
        "--config",
        str(cli_run / "config.yaml"),
        "--ckpt_path",
        str(cli_run / "checkpoints" / "last.ckpt"),
    ]
    runs_before = sorted(cli_run.parent.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *args],
        cwd=cli_run.parents[2],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(cli_run.parent.iterdir()) == runs_before, "validate starts no run"
    printed = result.stdout + result.stderr
    assert "held-out evaluation of " in printed and "batches (100 %)" in printed, "it says where it is"
    record = json.loads((cli_run / "validate.json").read_text())
    fitted = json.loads((cli_run / "summary.json").read_text())
    assert record["checkpoint"].endswith("last.ckpt")
    assert record["heldout"]["loss"] == pytest.approx(fitted["heldout"]["loss"], rel=1e-5)
    assert record["heldout"]["tokens"] == fitted["heldout"]["tokens"]
    assert record["data"]["corpus_sha256"] == fitted["data"]["corpus_sha256"]


@pytest.mark.slow
def test_summary_val_figures_match_the_logged_curve(cli_run):
    summary = json.loads((cli_run / "summary.json").read_text())
    val = [(e.step, e.value) for e in events_of(cli_run).Scalars("val/loss")]
    assert [s for s, _ in val] == [0, 19, 39]
    assert summary["initial_val_loss"] == pytest.approx(val[0][1], rel=1e-6)
    assert summary["final_val_loss"] == pytest.approx(val[-1][1], rel=1e-6)
    best_value = min(v for _, v in val)
    assert summary["best_val_loss"] == pytest.approx(best_value, rel=1e-6)
    assert summary["final_val_loss"] < summary["initial_val_loss"] - 1.0
    grad_norms = [e.value for e in events_of(cli_run).Scalars("train/grad_norm")]
    assert summary["grad_norm_max"] >= max(grad_norms) - 1e-5


@pytest.mark.slow
def test_tensorboard_hparams_hold_the_real_final_metrics(cli_run):
    summary = json.loads((cli_run / "summary.json").read_text())
    events = events_of(cli_run)
    scalar_tags = events.Tags()["scalars"]
    assert "hp_metric" not in scalar_tags, "no placeholder metric"
    for key in ("final_val_loss", "best_val_loss", "initial_val_loss"):
        (point,) = events.Scalars(f"hparams/{key}")
        assert point.value == pytest.approx(summary[key], rel=1e-6) and point.step == STEPS
    assert events.Scalars("hparams/diverged")[0].value == 0.0
    assert events.Scalars("hparams/spike_count")[0].value == summary["spike_count"]

    content = events.PluginTagToContent("hparams")
    assert "_hparams_/experiment" not in content, "TensorBoard derives the experiment (and differs) from all runs"
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["model.config.d_model"].number_value == 64
    assert start.hparams["model.config.norm_placement"].string_value == "andrea-lab:pre"
    assert start.hparams["model.lr"].number_value == pytest.approx(3e-3)
    assert start.hparams["model.warmup_steps"].number_value == 5
    assert start.hparams["trainer.max_steps"].number_value == STEPS
    assert start.hparams["data.batch_size"].number_value == 8
    assert start.hparams["model.compile"].WhichOneof("kind") == "bool_value"
    assert start.hparams["seed"].number_value == 1337
    assert start.hparams["Suite"].string_value == "None", "a plain fit belongs to no suite"
    assert start.group_name == f"{cli_run.parent.name}/{cli_run.name}", "the trial is named by its run"
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
    assert end.status == api_pb2.STATUS_SUCCESS


# ------------------------------------------------------------ in-process


class RaiseAt(L.Callback):
    def __init__(self, step: int, exception: BaseException):
        self.step, self.exception = step, exception

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise self.exception


def test_keyboard_interrupt_writes_an_interrupted_summary(tmp_path, text_corpus):
    summary = RunSummary()
    with pytest.raises(SystemExit):  # Lightning turns Ctrl-C into a graceful shutdown and exit status 1
        fit(
            tmp_path,
            text_corpus,
            [StabilityMonitor(interval=2), summary, RaiseAt(3, KeyboardInterrupt())],
            max_steps=10,
        )
    written = json.loads(summary.path.read_text())
    assert written["status"] == "interrupted" and written["steps"] == 3
    assert written["tokens_seen"] == 3 * 4 * 32 and written["initial_val_loss"] is not None
    assert tuple(written) == SUMMARY_KEYS


def test_an_exception_writes_an_interrupted_summary_and_propagates(tmp_path, text_corpus):
    summary = RunSummary()
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, text_corpus, [summary, RaiseAt(2, RuntimeError("boom"))], max_steps=10)
    written = json.loads(summary.path.read_text())
    assert written["status"] == "interrupted" and written["steps"] == 2
    assert written["spike_count"] == 0 and written["divergence"] == {"step": None, "kind": None}


@pytest.mark.parametrize("stop_on_divergence, status", [(False, "interrupted"), (True, "diverged")])
def test_a_run_interrupted_after_it_diverged_is_done_only_if_the_divergence_would_have_ended_it(
    tmp_path, text_corpus, stop_on_divergence, status
):
    # Every loss is "at the unigram level" (0): stuck from step 0, declared at the flush the interruption forces.
    # A run going on to its end (stop_on_divergence false: the instability suite) must resume from its checkpoint,
    # not be skipped by the next sweep as done with no held-out loss (it happened: two d128 runs, 2026-12-04).
    monitor = StabilityMonitor(
        interval=0,
        flush_every=10,
        unigram_loss=0.0,
        stuck_after=0,
        stuck_patience=1,
        stop_on_divergence=stop_on_divergence,
    )
    summary = RunSummary()
    with pytest.raises(SystemExit):
        fit(tmp_path, text_corpus, [monitor, summary, RaiseAt(3, KeyboardInterrupt())], max_steps=10)
    written = json.loads(summary.path.read_text())
    assert written["divergence"] == {"step": 0, "kind": "stuck_at_unigram"}
    assert written["status"] == status and written["steps"] == 3
    assert run_status(None, True, False) == "interrupted" and run_status(None, False, False) == "finished"


def test_a_nonfinite_stop_after_an_earlier_divergence_is_diverged_not_interrupted():
    # Measured: a d128 run stuck at the unigram loss from step ~500, going on (stop_on_divergence false), whose
    # loss turned non-finite at 1205: the guard raised DivergenceError; the first divergence (stuck) is the record.
    stuck = Divergence(500, "stuck_at_unigram")
    assert run_status(stuck, interrupted=True, ended_by_divergence=True) == "diverged"
    assert run_status(stuck, interrupted=True, ended_by_divergence=False) == "interrupted"
    assert run_status(Divergence(9, "nonfinite"), interrupted=True, ended_by_divergence=False) == "diverged"


class ScriptedValLoss(AndreaLM):
    """AndreaLM whose validation loss is scripted by step: 5.0 before training, then 2.0, then 3.5."""

    SCRIPT = {0: 5.0, 2: 2.0, 4: 3.5}

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", torch.tensor(self.SCRIPT[self.global_step]))

    def on_validation_epoch_end(self):
        pass


def test_final_validation_far_above_the_best_is_diverged(tmp_path, text_corpus):
    module = ScriptedValLoss(config=preset("andrea-micro", block_size=32))
    summary = RunSummary()
    trainer = fit(
        tmp_path, text_corpus, [StabilityMonitor(interval=0), summary], max_steps=4, module=module, val_check_interval=2
    )
    written = json.loads(summary.path.read_text())
    assert (written["initial_val_loss"], written["best_val_loss"], written["final_val_loss"]) == (5.0, 2.0, 3.5)
    assert written["best_step"] == 2
    assert written["status"] == "diverged"
    assert written["divergence"] == {"step": 4, "kind": "final_above_best"}
    hparams = EventAccumulator(trainer.logger.log_dir)
    hparams.Reload()
    assert hparams.Scalars("hparams/diverged")[0].value == 1.0


def test_the_record_name_is_fixed_but_older_configs_naming_it_still_load():
    assert RunSummary(filename="summary.json").enabled
    with pytest.raises(ValueError, match="summary.filename is 'result.json', but the run record is always"):
        RunSummary(filename="result.json")


def test_disabled_summary_writes_nothing(tmp_path, text_corpus):
    trainer = fit(tmp_path, text_corpus, [RunSummary(enabled=False)], max_steps=1)
    assert not (Path(trainer.log_dir) / "summary.json").exists()


def test_plugin_provenance_for_names_qualified_names_and_import_paths():
    version = metadata.version("andrea-lab")
    expected = {
        "name": "post",
        "distribution": "andrea-lab",
        "version": version,
        "target": "andrea_lab.model.builtin.placements:PostNorm",
    }
    assert plugin_provenance("norm_placement", "post") == expected
    assert plugin_provenance("norm_placement", "andrea-lab:post") == expected
    assert plugin_provenance("norm_placement", "stability_helpers:BareNoResidual") == {
        "name": "stability_helpers:BareNoResidual",
        "distribution": None,
        "version": None,
        "target": "stability_helpers:BareNoResidual",
    }
