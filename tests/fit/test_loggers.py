import multiprocessing as mp

from andrea_lab.fit.loggers import AndreaTensorBoardLogger


def claim_version(save_dir: str) -> int:
    return AndreaTensorBoardLogger(save_dir=save_dir, name="race").version


def test_concurrent_fits_get_distinct_versions(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        versions = pool.map(claim_version, [str(tmp_path)] * 6)
    assert sorted(versions) == list(range(6))
    assert sorted(p.name for p in (tmp_path / "race").iterdir()) == [f"version_{v}" for v in range(6)]


def test_existing_runs_are_never_reused(tmp_path):
    old = tmp_path / "exp" / "version_0"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("mine")
    logger = AndreaTensorBoardLogger(save_dir=str(tmp_path), name="exp")
    assert logger.version == 1
    assert (old / "config.yaml").read_text() == "mine"


def test_lightnings_epoch_counter_is_not_logged(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = AndreaTensorBoardLogger(save_dir=str(tmp_path), name="exp")
    logger.log_metrics({"epoch": 0.0, "train/loss": 2.0}, step=3)
    logger.finalize("success")
    assert EventAccumulator(logger.log_dir).Reload().Tags()["scalars"] == ["train/loss"]


def test_a_fit_that_fails_before_writing_leaves_no_run_directory(tmp_path, monkeypatch):
    """A corpus too small for an 8000-id BPE the user asked for fails in prepare_data, after the logger made
    version_0: one line, exit 2, and no empty version_0 for TensorBoard and andrea compare to list. (With the
    default size the BPE is fitted to the corpus before anything is built: fit.vocab_fit.)"""
    from pathlib import Path

    from andrea_lab.cli import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 200)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    quickstart = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"
    command = ["fit", "--config", str(quickstart), "--data.corpus", str(corpus), "--trainer.max_steps", "1"]
    assert main(command) == 2 and not (tmp_path / "runs").exists()  # under 769 ids: refused before any directory
    assert main([*command, "--model.config.vocab_size", "8000"]) == 2
    assert list((tmp_path / "runs" / "quickstart").iterdir()) == []
    assert AndreaTensorBoardLogger(str(tmp_path / "runs"), name="quickstart").version == 0, "version_0 is free again"
