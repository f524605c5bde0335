"""Files someone hands you -- a checkpoint, a run directory, a saved config.yaml -- may not delete, import
or overwrite anything (issue: "Handed files and reruns"). Each test performs the attack and checks it fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from andrea_testing import MICRO_OVERRIDES
from filelock import FileLock

from andrea_lab.cli import main as cli_main
from andrea_lab.fit.checkpoint import AndreaModelCheckpoint
from andrea_lab.model.registry import PluginError, UnregisteredPluginError, resolve
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")
RUN = Path("runs/quickstart/version_0")


def fit_args(corpus: Path, max_steps: int, *extra: str) -> list[str]:
    return [
        "fit",
        "--config",
        QUICKSTART,
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(corpus),
        "--model.config.d_model",
        "32",
        "--model.config.block_size",
        "32",
        "--data.batch_size",
        "2",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.num_sanity_val_steps",
        "1",
        "--heldout.max_tokens",
        "2048",
        "--trainer.max_steps",
        str(max_steps),
        *extra,
    ]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, text_corpus) -> Path:
    """A directory holding ``runs/quickstart/version_0``: a finished 2-step micro fit (copied per test)."""
    root = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert cli_main(fit_args(text_corpus, 2)) == 0
    return root


@pytest.fixture
def workdir(finished_run, tmp_path, monkeypatch) -> Path:
    """A copy of the finished run's working directory, made the current directory."""
    work = tmp_path / "work"
    shutil.copytree(finished_run, work, symlinks=True)
    monkeypatch.chdir(work)
    return work


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- 1. a checkpoint's callback state deletes a directory outside the run ---------------------------------


def poisoned_checkpoint(source: Path, new_run: Path, out: Path) -> Path:
    """``source`` with its ModelCheckpoint state naming ``new_run/checkpoints/../../../../important``."""
    checkpoint = torch.load(source, weights_only=True)
    key = next(k for k in checkpoint["callbacks"] if k.startswith("ModelCheckpoint"))
    dirpath = str(new_run / "checkpoints")
    evil = dirpath + "/../../../../important"
    checkpoint["callbacks"][key].update(
        dirpath=dirpath,
        last_model_path=evil,
        best_model_path=evil,
        kth_best_model_path=evil,
        best_k_models={evil: torch.tensor(1.0)},
    )
    torch.save(checkpoint, out)
    return out


def test_a_handed_checkpoint_cannot_delete_a_directory_outside_the_run(workdir, text_corpus):
    important = workdir / "important"
    important.mkdir()
    (important / "thesis.tex").write_text("years of work")
    new_run = Path("runs/quickstart/version_1")
    downloaded = poisoned_checkpoint(workdir / RUN / "checkpoints/last.ckpt", new_run, workdir / "downloaded.ckpt")
    assert cli_main(fit_args(text_corpus, 4, "--ckpt_path", str(downloaded))) == 0
    assert (workdir / new_run / "checkpoints/last.ckpt").is_file(), "the fit ran into the predicted directory"
    assert (important / "thesis.tex").read_text() == "years of work"


def test_restored_paths_outside_the_directory_are_dropped(tmp_path):
    dirpath = tmp_path / "run/checkpoints"
    dirpath.mkdir(parents=True)
    (dirpath / "step1.ckpt").write_bytes(b"x")
    inside, outside = str(dirpath / "step1.ckpt"), str(dirpath) + "/../../elsewhere"
    callback = AndreaModelCheckpoint(dirpath=str(dirpath))
    state = {
        **callback.state_dict(),
        "best_model_path": outside,
        "last_model_path": inside,
        "best_k_models": {inside: torch.tensor(1.0), outside: torch.tensor(0.5), "s3://bucket/x.ckpt": 0.1},
    }
    with pytest.warns(UserWarning, match="outside this run's checkpoint directory"):
        callback.load_state_dict(state)
    assert callback.last_model_path == inside and callback.best_model_path == ""
    assert list(callback.best_k_models) == [inside]


def test_checkpoint_removal_never_removes_a_directory(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep").write_text("x")
    with pytest.warns(UserWarning, match="not removing"):
        AtomicCheckpointIO().remove_checkpoint(folder)
    assert (folder / "keep").exists()


# --- 2. a checkpoint chooses a module to import ------------------------------------------------------------

EVIL_MODULE = "from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('ran')\nclass Act: pass\n"


@pytest.fixture
def evil_module(tmp_path, monkeypatch) -> Path:
    """``evilmod.py`` on the Python path (as a file in the working directory is for ``python -m``)."""
    (tmp_path / "evilmod.py").write_text(EVIL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "evilmod", raising=False)
    return tmp_path / "PWNED"


@pytest.mark.parametrize(
    "command", [["generate"], ["trace", "--text", "def f"], ["export", "--to", "hf", "--out", "x"]]
)
def test_a_checkpoint_never_chooses_a_module_to_import(command, evil_module, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANDREA_LAB_IMPORT_PATHS", "1")  # not even with the opt-in: it is the user's, not the file's
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"config": {"activation": "evilmod:Act"}}}, path)
    assert cli_main([command[0], "--ckpt", str(path), *command[1:]]) == 2
    assert not evil_module.exists(), "the checkpoint's module was imported"
    assert "'evilmod:Act', which selects no registered plugin" in error_line(capsys)


def test_an_import_path_needs_the_opt_in_and_is_refused_before_importing(evil_module, monkeypatch):
    monkeypatch.delenv("ANDREA_LAB_IMPORT_PATHS", raising=False)
    with pytest.raises(UnregisteredPluginError, match="ANDREA_LAB_IMPORT_PATHS=1"):
        resolve("activation", "evilmod:Act")
    assert not evil_module.exists()
    monkeypatch.setenv("ANDREA_LAB_IMPORT_PATHS", "1")
    with pytest.raises(PluginError, match="does not satisfy the activation contract"):
        resolve("activation", "evilmod:Act")  # imported now (the user asked), then refused by the contract
    assert evil_module.exists()


# --- 3. a handed run directory writes outside itself ------------------------------------------------------


def test_a_symlinked_run_file_is_refused_and_nothing_is_written_through_it(workdir, capsys):
    (workdir / RUN / "hparams.yaml").unlink()
    (workdir / RUN / "hparams.yaml").symlink_to("../../../login_script.sh")
    assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "3"]) == 2
    assert not (workdir / "login_script.sh").exists()
    assert "hparams.yaml is a symbolic link" in error_line(capsys)


# --- 4. re-running a saved config destroys a finished run's record ------------------------------------------


def test_a_resumed_runs_saved_config_reruns_as_a_new_version(workdir, capsys):
    assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "3"]) == 0
    record = (workdir / RUN / "summary.json").read_bytes()
    assert (
        cli_main(["fit", "--config", str(RUN / "config.yaml"), "--trainer.max_steps", "2", "--model.lr", "1e-2"]) == 0
    )
    assert (workdir / RUN / "summary.json").read_bytes() == record, "the finished run's record was rewritten"
    assert '"lr": 0.01' in (workdir / "runs/quickstart/version_1/summary.json").read_text()


def test_a_fit_never_writes_into_an_existing_run_it_does_not_resume(workdir, capsys):
    record = (workdir / RUN / "summary.json").read_bytes()
    code = cli_main(
        [
            "fit",
            "--config",
            str(RUN / "config.yaml"),
            "--trainer.logger.init_args.version",
            "version_0",
            "--model.lr",
            "3e-3",
        ]
    )
    assert code == 2
    assert "already holds a run" in error_line(capsys)
    assert (workdir / RUN / "summary.json").read_bytes() == record


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("more", [[], ["--trainer.max_steps", "2"], ["--trainer.max_steps=1"]])
def test_resuming_a_finished_run_says_so_and_leaves_every_byte_of_it(more, workdir, capsys):
    before = _tree_bytes(workdir / RUN)
    steps = json.loads((workdir / RUN / "summary.json").read_text())["steps"]
    assert cli_main(["fit", "--resume", str(RUN), *more]) == 2
    err = error_line(capsys)
    assert f"the run finished after {steps} steps" in err and f"--resume {RUN} --trainer.max_steps" in err
    assert _tree_bytes(workdir / RUN) == before
    assert sorted(p.name for p in (workdir / RUN).parent.iterdir()) == ["version_0"]  # no new version either


# --- 8. resume accepts what it then ignores ----------------------------------------------------------------


@pytest.mark.parametrize(
    "override, named",
    [
        (["--model.lr", "5"], "model.lr (checkpoint 0.003, now 5.0)"),
        (["--model.config.dropout", "0.5"], "model.config.dropout"),
        (["--data.corpus", "other.txt"], "data.corpus"),
    ],
)
def test_resume_refuses_an_override_it_would_ignore(override, named, workdir, capsys):
    assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "3", *override]) == 2
    assert named in error_line(capsys)


def test_two_fits_never_write_into_one_run_at_once(workdir, capsys):
    with FileLock(workdir / RUN / ".run.lock"):
        assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "3"]) == 2
    assert "being written by another fit" in error_line(capsys)


def test_a_fit_that_ended_leaves_its_run_free_to_resume_in_the_same_process(workdir):
    assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "3"]) == 0
    assert cli_main(["fit", "--resume", str(RUN), "--trainer.max_steps", "4"]) == 0


def test_a_malformed_checkpoint_manifest_is_one_line(tmp_path, capsys):
    (tmp_path / "x.ckpt").write_bytes(b"not read")
    (tmp_path / "x.ckpt.sha256.json").write_text('{"bytes": "eight"}')
    assert cli_main(["generate", "--ckpt", str(tmp_path / "x.ckpt")]) == 2
    assert "checkpoint manifest" in error_line(capsys)
