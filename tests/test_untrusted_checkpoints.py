"""A checkpoint never runs code: a pickle payload given to every command that takes a checkpoint is refused
with one line and exit status 2, and the payload's file is never written. The positive control shows the
same file does run its payload when unpickled the unsafe way, so the test can fail.

Nor do its hyperparameters, plain tensors and strings as they are (issue 59): a ``{class_path, init_args}``
inside ``optimizer_args`` would be built by LightningCLI's parser, and an optimizer or schedule named by an
import path would import its module (with ``ANDREA_LAB_IMPORT_PATHS=1``); both are refused by every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import yaml
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


# --- hyperparameters that name a class or a module (issue 59) ------------------------------------------------

#: A class that leaves a mark when built: FileHandler opens (and creates) its file, mode "w" truncating it.
MARKING_CLASS = "logging.FileHandler"


def class_spec(marker: Path) -> dict:
    return {"class_path": MARKING_CLASS, "init_args": {"filename": str(marker), "mode": "w"}}


#: Where a checkpoint hides the class: a ``dict[str, Any]`` value, deeper in a list, or as a YAML string
#: (jsonargparse parses a string given for ``Any`` as YAML), each with the key path the refusal names.
HIDDEN = {
    "optimizer_args": (lambda spec: {"optimizer_args": {"x": spec}}, "hyper_parameters.optimizer_args.x.class_path"),
    "schedule_args-deep": (
        lambda spec: {"schedule_args": {"a": [{"b": spec}]}},
        "hyper_parameters.schedule_args.a[0].b.class_path",
    ),
    "yaml-string": (
        lambda spec: {"optimizer_args": {"x": yaml.safe_dump(spec, default_flow_style=True)}},
        "hyper_parameters.optimizer_args.x.class_path",
    ),
}


def tiny_hyperparameters(**extra) -> dict:
    """An andrea module's hyperparameters, as a fit saves them, for a 1-layer 32-wide model."""
    from andrea_lab.model.config import AndreaConfig

    config = AndreaConfig(vocab_size=257, block_size=32, d_model=32, n_layer=1, n_head=2)
    return {"config": asdict(config), "lr": 1e-3, "optimizer": "adamw", "schedule": None, **extra}


def handed_checkpoint(path: Path, hparams: dict) -> Path:
    """A weights-only checkpoint (plain tensors and strings) with ``hparams`` and a byte tokenizer."""
    from andrea_lab.data.checkpoint_state import DATA_STATE_KEY, TOKENIZER_STATE_KEY
    from andrea_lab.data.tokenizer import byte_tokenizer

    data = {TOKENIZER_STATE_KEY: byte_tokenizer().to_str(), "eot_id": 256, "vocab_size": 257}
    torch.save({"state_dict": {}, "hyper_parameters": hparams, DATA_STATE_KEY: data, "global_step": 0}, path)
    return path


def argv(command: str, ckpt: Path, corpus: Path) -> list[str]:
    if command in OWN_COMMANDS:
        return [command, "--ckpt", str(ckpt), *COMMAND_ARGS[command]]
    return [
        command,
        "--config",
        str(REPO / "experiments/quickstart.yaml"),
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(corpus),
        "--ckpt_path",
        str(ckpt),
        *COMMAND_ARGS[command],
    ]


def one_line_refusal(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


#: What jsonargparse does with a hyperparameter typed like ``optimizer_args``, by its defaults (a fresh
#: interpreter: andrea's CLI changes them for the process, andrea_lab.fit.handed.keep_class_specs_as_data).
PARSER_DEFAULTS = """
import json, sys, warnings
from typing import Any, Optional
from jsonargparse import ArgumentParser
warnings.simplefilter("ignore")
def module(optimizer_args: Optional[dict[str, Any]] = None, schedule_args: Optional[dict[str, Any]] = None):
    pass
parser = ArgumentParser(exit_on_error=False)
parser.add_function_arguments(module, "model")
parser.instantiate_classes(parser.parse_object({"model": json.loads(sys.argv[1])}))
"""


@pytest.mark.parametrize("hidden", sorted(HIDDEN))
def test_the_parser_builds_each_hidden_class_by_default_so_these_tests_can_fail(hidden, tmp_path):
    marker = tmp_path / "MARKER"
    hide, _ = HIDDEN[hidden]
    subprocess.run([sys.executable, "-c", PARSER_DEFAULTS, json.dumps(hide(class_spec(marker)))], check=True)
    assert marker.exists()


#: Every checkpoint command with the class in ``optimizer_args``; one of each kind of command (a Lightning
#: subcommand, one of andrea's own) with it hidden deeper.
HIDING_CASES = [(command, "optimizer_args") for command in sorted(COMMAND_ARGS)] + [
    (command, hidden) for command in ("validate", "generate") for hidden in sorted(HIDDEN) if hidden != "optimizer_args"
]


@pytest.mark.parametrize("command, hidden", HIDING_CASES)
def test_every_command_refuses_a_class_in_the_hyperparameters(
    command, hidden, text_corpus, tmp_path, monkeypatch, capsys
):
    """validate/test/predict/fit --ckpt_path gave it to the parser, which built it; generate, trace, lens and
    export: refused as well, at the one reader of checkpoints."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    hide, key_path = HIDDEN[hidden]
    ckpt = handed_checkpoint(tmp_path / "handed.ckpt", tiny_hyperparameters(**hide(class_spec(marker))))
    line = one_line_refusal(capsys, cli_main(argv(command, ckpt, text_corpus)))
    assert not marker.exists(), f"andrea {command} built the checkpoint's class"
    assert f"{key_path} '{MARKING_CLASS}' names a class to build" in line
    assert "plain values" in line  # what is allowed instead


@pytest.mark.parametrize("command", ["validate", "generate", "trace", "lens", "export", "fit"])
@pytest.mark.parametrize("kind", ["optimizer", "schedule"])
def test_a_checkpoints_optimizer_or_schedule_never_imports_a_module(
    command, kind, text_corpus, tmp_path, monkeypatch, capsys
):
    """With the import-path opt-in set, an optimizer or schedule named ``module:Class`` by a checkpoint would
    import that module (only the model's kinds were checked): refused like them, the module never imported."""
    module = f"handed_{kind}_{command}"
    marker = tmp_path / "IMPORTED"
    (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Evil: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ANDREA_LAB_IMPORT_PATHS", "1")
    monkeypatch.chdir(tmp_path)
    ckpt = handed_checkpoint(tmp_path / "handed.ckpt", tiny_hyperparameters(**{kind: f"{module}:Evil"}))
    line = one_line_refusal(capsys, cli_main(argv(command, ckpt, text_corpus)))
    assert not marker.exists() and module not in sys.modules, f"andrea {command} imported the checkpoint's module"
    assert f"names {kind} '{module}:Evil', which selects no registered plugin" in line
    assert f"Installed in andrea_lab.{kind}:" in line
