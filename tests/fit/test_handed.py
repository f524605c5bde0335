"""andrea_lab/fit/handed.py: what a config may not choose, checked on the objects the trainer was built with."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.pytorch.strategies import SingleDeviceStrategy

from andrea_lab.errors import UsageError
from andrea_lab.fit.handed import require_safe_checkpoint_reading


class OwnLoaderStrategy(SingleDeviceStrategy):
    """A strategy that reads checkpoints its own way, as FSDP and DeepSpeed do (they need a GPU to build)."""

    def load_checkpoint(self, checkpoint_path):  # pragma: no cover - never reached: refused before
        raise AssertionError("read around andrea's reader")


def test_a_strategy_with_its_own_checkpoint_loader_is_refused_for_a_resume_only():
    own = SimpleNamespace(strategy=OwnLoaderStrategy(device="cpu"))
    with pytest.raises(UsageError, match="OwnLoaderStrategy reads a resumed checkpoint with its own loader"):
        require_safe_checkpoint_reading(own, "runs/x/checkpoints/last.ckpt")
    require_safe_checkpoint_reading(own, None)  # a fresh fit reads no checkpoint
    require_safe_checkpoint_reading(SimpleNamespace(strategy=SingleDeviceStrategy(device="cpu")), "last.ckpt")


def test_andreas_fsdp_reads_a_resumed_checkpoint_with_andreas_reader_first(tmp_path):
    """FSDP's own loader unpickles; andrea's FSDP refuses a payload before it opens the file, and a sharded
    checkpoint (a directory: torch.distributed.checkpoint's metadata is a pickle) outright."""
    import torch

    from andrea_lab.fit.strategies import AndreaFSDPStrategy
    from andrea_lab.runs.checkpoint_io import UnsafeCheckpointError

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "PAYLOAD_RAN"), "w"))

    strategy = AndreaFSDPStrategy(state_dict_type="full")
    require_safe_checkpoint_reading(SimpleNamespace(strategy=strategy), "last.ckpt")  # allowed to resume
    torch.save({"state_dict": {}, "payload": Payload()}, tmp_path / "handed.ckpt")
    with pytest.raises(UnsafeCheckpointError, match="handed.ckpt was refused"):
        strategy.load_checkpoint(tmp_path / "handed.ckpt")
    (tmp_path / "sharded").mkdir()
    with pytest.raises(UsageError, match="is a sharded FSDP checkpoint"):
        strategy.load_checkpoint(tmp_path / "sharded")
    assert not (tmp_path / "PAYLOAD_RAN").exists()


# --- a config's model and data sections are plain values (issue 59) ------------------------------------------


QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def hostile_config(where: Path, marker: Path, base: Path | None = None) -> str:
    """``base`` (or nothing) with ``model.optimizer_args`` (``dict[str, Any]``) holding a class that creates
    ``marker``, written to ``where``."""
    import yaml

    config = yaml.safe_load(base.read_text()) if base else {}
    spec = {"class_path": "logging.FileHandler", "init_args": {"filename": str(marker), "mode": "w"}}
    config.setdefault("model", {})["optimizer_args"] = {"x": spec}
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(yaml.safe_dump(config))
    return str(where)


def handed_fit(given_as: str, tmp_path: Path, marker: Path) -> list[str]:
    """The arguments of a fit handed the class in a ``--config`` file, as a command-line value, or in the
    config.yaml of a run it resumes (its checkpoint is never read: the config is refused first)."""
    if given_as == "config":
        return ["fit", "--config", str(QUICKSTART), "--config", hostile_config(tmp_path / "handed.yaml", marker)]
    if given_as == "argument":
        spec = "{x: {class_path: logging.FileHandler, init_args: {filename: %s, mode: w}}}" % marker
        return ["fit", "--config", str(QUICKSTART), "--model.optimizer_args", spec]
    run = tmp_path / "runs" / "quickstart" / "version_0"
    hostile_config(run / "config.yaml", marker, base=QUICKSTART)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "preempted.ckpt").write_bytes(b"")
    return ["fit", "--resume", str(run)]


@pytest.mark.parametrize("given_as", ["config", "argument", "resumed-run"])
def test_a_class_in_the_model_section_is_refused_before_it_is_built(
    given_as, tmp_path, text_corpus, monkeypatch, capsys
):
    from andrea_testing import MICRO_OVERRIDES

    from andrea_lab.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    argv = [*handed_fit(given_as, tmp_path, marker), *MICRO_OVERRIDES, "--data.corpus", str(text_corpus)]
    before = sorted(tmp_path.rglob("*"))
    code = cli_main([*argv, "--trainer.max_steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert "model.optimizer_args.x.class_path 'logging.FileHandler' names a class to build" in lines[0]
    assert "plain values" in lines[0]  # what is allowed instead
    assert not marker.exists() and sorted(tmp_path.rglob("*")) == before  # nothing written


def test_check_plain_sections_passes_a_plain_config_and_names_the_section():
    from andrea_lab.fit.handed import check_plain_sections

    check_plain_sections({"model": {"optimizer_args": {"momentum": 0.9}}, "trainer": {"logger": {"class_path": "x"}}})
    with pytest.raises(UsageError, match=r"the config: data\.extra\.class_path 'x' names a class"):
        check_plain_sections({"data": {"extra": {"class_path": "x"}}})


def test_a_class_in_a_suites_model_options_is_refused_before_any_run(tmp_path, text_corpus, monkeypatch, capsys):
    """A suite's ``common:`` reaches every fit's parser (the sweep's preflight first): refused there, no run."""
    import yaml

    from andrea_lab.cli import main as cli_main
    from andrea_lab.experiments.sweep.tiny_suite import MICRO

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    spec = {"class_path": "logging.FileHandler", "init_args": {"filename": str(marker), "mode": "w"}}
    base = Path(__file__).resolve().parents[2] / "experiments" / "cpu-base.yaml"
    common = {**MICRO, "trainer.max_steps": 1, "data.corpus": str(text_corpus), "model.optimizer_args": {"x": spec}}
    suite = {"name": "handed", "base": str(base), "common": common, "lrs": [1e-3], "seeds": [0]}
    suite["variants"] = [{"name": "only", "overrides": {}}]
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    code = cli_main(["sweep", str(tmp_path / "suite.yaml"), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "model.optimizer_args.x.class_path 'logging.FileHandler' names a class to build" in lines[0]
    assert not marker.exists() and not list((tmp_path / "runs").rglob("summary.json"))
