"""Every path a fit writes lies inside the run's own fresh directory, or the fit is refused in one line before
anything is written (issue 59): a Lightning callback's own path option (SpikeDetection's
``exclude_batches_path``), the tuners' temporary checkpoints (written beside ``default_root_dir``), and a first
logger whose ``version: ''`` makes a user's existing folder the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from andrea_testing import QUICKSTART, refused, tiny_trainer
from andrea_testing import micro_fit as shared_micro_fit
from lightning.fabric.utilities.spike import TrainingSpikeException
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import OnExceptionCheckpoint, SpikeDetection

from andrea_lab.cli import main as cli_main
from andrea_lab.fit.write_paths import check_path_options, path_parameters
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO
from andrea_lab.runs.claim import RunDirectoryError

SPIKE = "lightning.pytorch.callbacks.SpikeDetection"


def micro_fit(corpus: Path, *extra: str) -> list[str]:
    """A two-step micro fit without its held-out evaluation."""
    return shared_micro_fit(corpus, *extra, steps=2, heldout=("--heldout.enabled", "false"))


def config_file(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "handed.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def spike_callback(**init_args) -> dict:
    """SpikeDetection that calls every step after the first a spike (mode max: a falling loss is 'worse')."""
    return {"class_path": SPIKE, "init_args": {"mode": "max", "rtol": None, "warmup": 1, **init_args}}


def test_a_callbacks_path_option_cannot_replace_a_users_file(tmp_path, text_corpus, monkeypatch, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    handed = config_file(tmp_path, {"trainer": {"callbacks": [spike_callback(exclude_batches_path=str(notes))]}})
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--config", handed))
    refused(capsys, code, "exclude_batches_path", str(notes))
    assert notes.read_text() == '{"mine": true}\n'
    assert not [p for p in tmp_path.glob("runs/**/*") if p.is_file()], "a refused fit writes nothing"


def test_a_relative_path_option_is_judged_where_it_lands(tmp_path, text_corpus, monkeypatch, capsys):
    """``notes.json`` (relative: the working directory) and ``runs/../notes.json`` are outside the run too."""
    (tmp_path / "notes.json").write_text("mine\n")
    handed = config_file(
        tmp_path, {"trainer": {"callbacks": [spike_callback(exclude_batches_path="runs/quickstart/../../notes.json")]}}
    )
    monkeypatch.chdir(tmp_path)
    refused(capsys, cli_main(micro_fit(text_corpus, "--config", handed)), "exclude_batches_path")
    assert (tmp_path / "notes.json").read_text() == "mine\n"


def test_a_callbacks_default_path_lands_inside_the_run(tmp_path, text_corpus, monkeypatch):
    """Left unset, SpikeDetection writes ``skip_batches.json`` beside ``default_root_dir``: the run directory."""
    handed = config_file(tmp_path, {"trainer": {"callbacks": [spike_callback()]}})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainingSpikeException):  # Lightning's way to stop at a spike; where it wrote is the point
        cli_main(micro_fit(text_corpus, "--config", handed, "--trainer.max_steps", "6"))
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("skip_batches.json"))
    assert written == ["runs/quickstart/version_0/skip_batches.json"]


@pytest.mark.parametrize(
    "tuner",
    [{"class_path": "lightning.pytorch.callbacks.LearningRateFinder", "init_args": {"num_training_steps": 2}}],
    ids=["lr-finder"],
)
def test_a_tuners_checkpoint_is_written_inside_the_run(tuner, tmp_path, text_corpus, monkeypatch):
    saved: list[Path] = []
    save = AtomicCheckpointIO.save_checkpoint

    def recording(self, checkpoint, path, storage_options=None):
        saved.append(Path(path).resolve())
        return save(self, checkpoint, path, storage_options)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", recording)
    handed = config_file(tmp_path, {"trainer": {"callbacks": [tuner]}})
    monkeypatch.chdir(tmp_path)
    cli_main(micro_fit(text_corpus, "--config", handed))
    run = (tmp_path / "runs" / "quickstart" / "version_0").resolve()
    tuner_files = [path for path in saved if path.name.startswith((".lr_find", ".scale_batch_size"))]
    assert tuner_files, f"the tuner saved no checkpoint: {saved}"
    assert all(run in path.parents for path in tuner_files), tuner_files
    assert not list(tmp_path.glob(".lr_find*")) and not list(tmp_path.glob(".scale_batch_size*"))


@pytest.mark.parametrize(
    "logger", ["lightning.pytorch.loggers.CSVLogger", "andrea_lab.fit.loggers.AndreaTensorBoardLogger"]
)
def test_an_empty_logger_version_cannot_make_a_users_folder_the_run(logger, tmp_path, text_corpus, monkeypatch, capsys):
    mine = tmp_path / "mine" / "notes"
    mine.mkdir(parents=True)
    (mine / "metrics.csv").write_text("my,own\n1,2\n")
    handed = config_file(
        tmp_path,
        {
            "trainer": {
                "logger": {
                    "class_path": logger,
                    "init_args": {"save_dir": str(tmp_path / "mine"), "name": "notes", "version": ""},
                }
            }
        },
    )
    monkeypatch.chdir(tmp_path)
    refused(capsys, cli_main(micro_fit(text_corpus, "--config", handed)), "version")
    assert sorted(p.name for p in mine.iterdir()) == ["metrics.csv"]
    assert (mine / "metrics.csv").read_text() == "my,own\n1,2\n"


def test_a_run_directory_that_holds_a_users_files_is_not_fresh(tmp_path, text_corpus, monkeypatch, capsys):
    """A version named by the config that is an existing folder of the user's (no run files in it)."""
    mine = tmp_path / "runs" / "quickstart" / "mine"
    mine.mkdir(parents=True)
    (mine / "metrics.csv").write_text("my,own\n")
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--trainer.logger.init_args.version", "mine"))
    refused(capsys, code, "runs/quickstart/mine is not a fresh run directory", "metrics.csv")
    assert sorted(p.name for p in mine.iterdir()) == ["metrics.csv"]


# --- the rule by name, on components built in Python ------------------------------------------------------


class NotesWriter(Callback):
    """A third-party callback the project has never heard of, with its own place to write."""

    def __init__(self, notes_path: str = "", output_directory: str = "", verbose: bool = False):
        self.notes_path, self._output_directory, self.verbose = notes_path, output_directory, verbose

    def state_dict(self) -> dict:
        return {"notes_path": self.notes_path}

    def load_state_dict(self, state: dict) -> None:
        self.notes_path = state["notes_path"]


@pytest.mark.parametrize(
    ("component", "named"),
    [
        (NotesWriter(notes_path="../notes.json"), "notes_path"),
        (NotesWriter(output_directory="/tmp"), "output_directory"),
        (OnExceptionCheckpoint(dirpath="/tmp"), "dirpath"),
    ],
    ids=["notes-path", "private-attribute", "on-exception-dirpath"],
)
def test_any_callbacks_path_option_outside_the_run_is_refused(component, named, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "x" / "version_0"
    trainer = tiny_trainer(callbacks=[component], enable_checkpointing=True)
    with pytest.raises(RunDirectoryError, match=named):
        check_path_options(trainer, run)


def test_path_options_inside_the_run_and_other_parameters_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "x" / "version_0"
    inside = NotesWriter(notes_path=str(run / "notes.json"), output_directory="runs/x/version_0/out", verbose=True)
    check_path_options(tiny_trainer(callbacks=[inside, SpikeDetection()]), run)
    assert path_parameters(inside) == ["notes_path", "output_directory"]


def test_a_checkpoints_callback_state_cannot_carry_a_path_outside_the_run(tmp_path, monkeypatch):
    """A callback that restores its path from the checkpoint (as SpikeDetection's ``bad_batches_path`` does)."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "x" / "version_0"
    notes = NotesWriter(notes_path=str(run / "notes.json"))
    stored = {notes.state_key: {"notes_path": str(tmp_path / "notes.json")}}
    with pytest.raises(RunDirectoryError, match="checkpoint's state of callback .*notes.json"):
        check_path_options(tiny_trainer(callbacks=[notes]), run, stored)
    check_path_options(tiny_trainer(callbacks=[notes]), run, {notes.state_key: {"notes_path": "runs/x/version_0/n"}})


@pytest.mark.slow  # a sweep of one fit in a subprocess: about 20 s alone, 90 s on a loaded machine
def test_a_suites_callback_cannot_replace_a_users_file_through_sweep(tmp_path, text_corpus, monkeypatch, capsys):
    """The same callback under a suite's ``common:``: the sweep's fit is refused, the user's file kept."""
    from andrea_lab.experiments.sweep.tiny_suite import MICRO

    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    suite = {
        "name": "attack",
        "base": str(Path(QUICKSTART).with_name("cpu-base.yaml")),
        "common": {
            **MICRO,
            "data.corpus": str(text_corpus),
            "heldout.enabled": False,
            "trainer.callbacks": [spike_callback(exclude_batches_path=str(notes))],
        },
        "lrs": [1e-3],
        "seeds": [0],
        "variants": [{"name": "only", "overrides": {}}],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    monkeypatch.chdir(tmp_path)
    code = cli_main(["sweep", str(tmp_path / "suite.yaml"), "--runs-dir", str(tmp_path / "runs")])
    assert notes.read_text() == '{"mine": true}\n'
    assert code != 0
    log = next((tmp_path / "runs").rglob("sweep.log")).read_text()
    assert "exclude_batches_path" in log and "Traceback" not in log, log[-2000:]
