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
