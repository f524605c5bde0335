"""Hostile inputs (issue 41): a handed config, suite, checkpoint or run record may not run code, write outside
its own fresh run directory, write through a link, overwrite a user's file, or end in a traceback or a hang.
Each test performs one attack and checks that it is refused with one line (exit status 2) and left no trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import main as cli_main

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the marker file is the mark of code that ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def payload_checkpoint(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1e-3}, "payload": Payload(marker)}, path)
    return path


def micro_fit(corpus: Path, *extra: str) -> list[str]:
    """A one-step micro fit of the quickstart config on ``corpus`` with ``extra`` arguments."""
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
        "0",
        "--heldout.max_tokens",
        "1024",
        "--trainer.max_steps",
        "1",
        *extra,
    ]


def refused(capsys, code: int, *named: str) -> str:
    """The error of a refused command: exit status 2, no traceback, one ``error:`` line naming ``named``."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    for text in named:
        assert text in lines[0], err
    return lines[0]


# --- 1. a handed config or suite cannot unpickle ----------------------------------------------------------

#: Each spelling of "load this checkpoint the unsafe way" a config file can hold; DIR holds the payload.
UNPICKLE_SPELLINGS = {
    "hpc-plugins-null": {"ckpt_path": "hpc", "weights_only": False, "trainer": {"plugins": None}},
    "hpc-torch-io": {
        "ckpt_path": "hpc",
        "trainer": {"plugins": [{"class_path": "lightning.pytorch.plugins.io.TorchCheckpointIO"}]},
    },
    "last-plugins-null": {"ckpt_path": "last", "trainer": {"plugins": None}},
    "hpc-weights-only-alone": {"ckpt_path": "hpc", "weights_only": False},
    "path-weights-only-false": {"ckpt_path": "DIR/last.ckpt", "weights_only": False},
    "strategy-checkpoint-io": {
        "ckpt_path": "hpc",
        "trainer": {
            "plugins": None,
            "strategy": {
                "class_path": "lightning.pytorch.strategies.SingleDeviceStrategy",
                "init_args": {
                    "device": "cpu",
                    "checkpoint_io": {"class_path": "lightning.pytorch.plugins.io.TorchCheckpointIO"},
                },
            },
        },
    },
}


def unpickle_attack(spelling: str, tmp_path: Path) -> tuple[dict, Path]:
    """The config of ``spelling`` pointing at a directory that holds the payload as every name Lightning
    looks for (``hpc_ckpt_1.ckpt``, ``last.ckpt``); returns it and the marker the payload would create."""
    marker = tmp_path / "PAYLOAD_RAN"
    where = tmp_path / "victim"
    for name in ("hpc_ckpt_1.ckpt", "last.ckpt"):
        payload_checkpoint(where / name, marker)
    config = yaml.safe_load(yaml.safe_dump(UNPICKLE_SPELLINGS[spelling]).replace("DIR", str(where)))
    config.setdefault("trainer", {})["default_root_dir"] = str(where)
    config["checkpoint"] = {"dirpath": str(where)} if config["ckpt_path"] == "last" else {}
    return config, marker


@pytest.mark.parametrize("spelling", sorted(UNPICKLE_SPELLINGS))
def test_hostile_config_cannot_unpickle_through_fit(spelling, tmp_path, text_corpus, monkeypatch, capsys):
    config, marker = unpickle_attack(spelling, tmp_path)
    (tmp_path / "attack.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--config", str(tmp_path / "attack.yaml")))
    assert not marker.exists(), f"{spelling}: the checkpoint's code ran"
    print(refused(capsys, code))


def suite_with_common(tmp_path: Path, corpus: Path, common: dict) -> Path:
    """A one-run suite of the tiny CPU base whose ``common:`` holds ``common``."""
    from andrea_lab.experiments.sweep.tiny_suite import MICRO

    base = Path(QUICKSTART).with_name("cpu-base.yaml")
    suite = {
        "name": "attack",
        "base": str(base),
        "common": {**MICRO, "trainer.max_steps": 1, "data.corpus": str(corpus), **common},
        "lrs": [1e-3],
        "seeds": [0],
        "variants": [{"name": "only", "overrides": {}}],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def dotted(config: dict, prefix: str = "") -> dict:
    """``{"trainer": {"plugins": None}}`` -> ``{"trainer.plugins": None}`` (a suite's override keys)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and key != "init_args" and "class_path" not in value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize("spelling", sorted(UNPICKLE_SPELLINGS))
def test_hostile_suite_common_cannot_unpickle_through_sweep(spelling, tmp_path, text_corpus, monkeypatch, capsys):
    config, marker = unpickle_attack(spelling, tmp_path)
    suite = suite_with_common(tmp_path, text_corpus, dotted(config))
    monkeypatch.chdir(tmp_path)
    code = cli_main(["sweep", str(suite), "--runs-dir", str(tmp_path / "runs")])
    assert not marker.exists(), f"{spelling}: the checkpoint's code ran"
    refused(capsys, code, "is set by the sweep")
