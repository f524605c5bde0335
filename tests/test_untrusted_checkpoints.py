"""A checkpoint never runs code: a pickle payload given to every command that takes a checkpoint is refused
with one line and exit status 2, and the payload's file is never written. The positive control shows the
same file does run its payload when unpickled the unsafe way, so the test can fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import LIGHTNING_COMMANDS, OWN_COMMANDS
from andrea_lab.cli import main as cli_main
from andrea_lab.runs.checkpoint_io import UnsafeCheckpointError, load_checkpoint

REPO = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this calls ``open(marker, "w")``: it creates a file, the mark of code that ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def payload_checkpoint(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "PAYLOAD_RAN"
    path = tmp_path / "shared.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1e-3}, "payload": Payload(marker)}, path)
    return path, marker


def test_the_payload_runs_when_unpickled_unsafely_so_this_test_can_fail(payload_checkpoint):
    path, marker = payload_checkpoint
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_the_loader_refuses_it_and_names_what_it_wanted(payload_checkpoint):
    path, marker = payload_checkpoint
    with pytest.raises(UnsafeCheckpointError, match=r"shared.ckpt was refused: .*only load by running code"):
        load_checkpoint(path)
    assert not marker.exists()


def commands_that_take_a_checkpoint(capsys) -> list[str]:
    """Every andrea command whose --help offers a checkpoint option, asked of the CLI itself."""
    found = []
    for command in [*LIGHTNING_COMMANDS, *OWN_COMMANDS]:
        try:
            cli_main([command, "--help"])
        except SystemExit:
            pass
        if "--ckpt" in capsys.readouterr().out:
            found.append(command)
    return found


def test_the_checkpoint_commands_are_the_ones_tested_below(capsys):
    assert sorted(commands_that_take_a_checkpoint(capsys)) == sorted(COMMAND_ARGS)


COMMAND_ARGS = {
    "generate": ["--prompt", "def "],
    "trace": ["--text", "def f"],
    "lens": [],
    "export": ["--to", "hf", "--out", "exported"],
    "fit": ["--trainer.max_steps", "1"],
    "validate": [],
    "test": [],
    "predict": [],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMAND_ARGS))
def test_every_command_refuses_the_payload_with_one_line(command, payload_checkpoint, text_corpus, tmp_path):
    path, marker = payload_checkpoint
    if command in OWN_COMMANDS:
        args = [command, "--ckpt", str(path), *COMMAND_ARGS[command]]
    else:
        args = [
            command,
            "--config",
            str(REPO / "experiments/quickstart.yaml"),
            *MICRO_OVERRIDES,
            "--data.corpus",
            str(text_corpus),
            "--ckpt_path",
            str(path),
            *COMMAND_ARGS[command],
        ]
    env = {**os.environ, "ANDREA_LAB_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert not marker.exists(), f"andrea {command} ran the checkpoint's code"
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "shared.ckpt was refused" in result.stderr


def test_weights_import_from_safetensors_and_weights_only_pickles(tmp_path, payload_checkpoint):
    from safetensors.torch import save_file

    from andrea_lab.errors import UsageError
    from andrea_lab.runs.checkpoint_io import load_weights

    weights = {"wte.weight": torch.randn(4, 3), "ln_f.bias": torch.zeros(3)}
    save_file(weights, tmp_path / "model.safetensors")
    loaded = load_weights(tmp_path / "model.safetensors")
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)
    torch.save(weights, tmp_path / "pytorch_model.bin")
    assert torch.equal(load_weights(tmp_path / "pytorch_model.bin")["wte.weight"], weights["wte.weight"])
    path, marker = payload_checkpoint
    bin_payload = path.with_name("pytorch_model_payload.bin")
    path.rename(bin_payload)
    with pytest.raises(UnsafeCheckpointError):
        load_weights(bin_payload)
    assert not marker.exists()
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UsageError, match="broken.safetensors is not a readable safetensors file"):
        load_weights(tmp_path / "broken.safetensors")
    with pytest.raises(UsageError, match=r"model.onnx is not a weights file andrea reads; valid: .safetensors"):
        load_weights(tmp_path / "model.onnx")
