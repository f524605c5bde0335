"""End to end through the real `andrea` console script: fit, checkpoints, TensorBoard, reload, generate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from andrea_testing import MICRO_OVERRIDES
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from andrea_lab.fit.module import AndreaLM

REPO = Path(__file__).resolve().parents[1]
ANDREA = [sys.executable, "-m", "andrea_lab.cli"]


def run_andrea(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*ANDREA, *args], cwd=cwd, capture_output=True, text=True, env=os.environ.copy(), timeout=600
    )
    if check and result.returncode != 0:
        raise AssertionError(f"andrea {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory, text_corpus) -> Path:
    workdir = tmp_path_factory.mktemp("fit")
    os.environ["ANDREA_LAB_CACHE"] = str(workdir / "cache")
    run_andrea(
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
        "60",
        "--trainer.val_check_interval",
        "20",
        cwd=workdir,
    )
    return workdir / "runs" / "quickstart" / "version_0"


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.mark.slow
def test_fit_writes_events_config_and_checkpoints(fitted_run):
    assert list(fitted_run.glob("events.out.tfevents.*"))
    config = yaml.safe_load((fitted_run / "config.yaml").read_text())
    assert config["model"]["config"]["vocab_size"] == 257
    assert "block_size" not in config["data"], "linked from model.config.block_size, never said twice"
    checkpoint = torch.load(fitted_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["datamodule_hyper_parameters"]["block_size"] == 64
    assert checkpoint["datamodule_hyper_parameters"]["vocab_size"] == 257


@pytest.mark.slow
def test_fit_lowers_the_validation_loss(fitted_run):
    val = scalars(fitted_run, "val/loss")
    assert val[0][0] == 0, "the validation loss before any update is logged at step 0"
    assert val[0][1] == pytest.approx(torch.log(torch.tensor(257.0)).item(), abs=0.3)
    assert val[-1][1] < val[0][1] - 1.0
    tags = EventAccumulator(str(fitted_run)).Reload().Tags()["scalars"]
    for tag in ("train/loss", "train/lr", "train/grad_norm", "val/perplexity"):
        assert tag in tags


@pytest.mark.slow
def test_load_from_checkpoint_reproduces_logits(fitted_run):
    ckpt = fitted_run / "checkpoints" / "last.ckpt"
    first = AndreaLM.load_from_checkpoint(ckpt, map_location="cpu").eval()
    second = AndreaLM.load_from_checkpoint(ckpt, map_location="cpu").eval()
    idx = torch.randint(0, 257, (2, 32))
    torch.testing.assert_close(first(idx)[0], second(idx)[0], rtol=0, atol=0)
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    torch.testing.assert_close(first.model.token_embed.weight, state["model.token_embed.weight"])
    assert first.config.d_model == 64 and first.config.vocab_size == 257


@pytest.mark.slow
def test_generate_samples_from_the_checkpoint(fitted_run):
    ckpt = fitted_run / "checkpoints" / "last.ckpt"
    result = run_andrea("generate", "--ckpt", str(ckpt), "--prompt", "def ", "--max_new_tokens", "20", cwd=fitted_run)
    assert result.stdout.startswith("def ") and len(result.stdout) > 10


@pytest.mark.slow
def test_validate_from_checkpoint(fitted_run, text_corpus):
    result = run_andrea(
        "validate",
        "--config",
        str(fitted_run / "config.yaml"),
        "--ckpt_path",
        str(fitted_run / "checkpoints" / "last.ckpt"),
        "--trainer.logger",
        "false",
        cwd=fitted_run.parent.parent.parent,
    )
    assert "val/loss" in result.stdout


def test_params_prints_the_spec_figures(tmp_path):
    out = run_andrea("params", "--preset", "andrea-120m", cwd=tmp_path).stdout
    for figure in ("4,718,592", "56,623,104", "85,054,464", "92,331,264"):
        assert figure in out
    assert '"120M" is a name, not the count' in out


def test_bad_input_is_one_message_without_traceback(tmp_path):
    result = run_andrea(
        "fit",
        "--config",
        str(REPO / "experiments/quickstart.yaml"),
        "--model.config.n_head",
        "5",
        "--trainer.max_steps",
        "1",
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    assert "d_model (128) must be divisible by n_head (5)" in result.stderr
    assert "Traceback" not in result.stderr


def test_lightning_argument_errors_are_one_line_with_exit_status_2(tmp_path):
    result = run_andrea(
        "fit",
        "--config",
        str(REPO / "experiments/quickstart.yaml"),
        "--trainer.max_steps",
        "-5",
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert (
        "andrea fit: error: invalid trainer argument: `max_steps` must be a non-negative integer or -1 "
        "(infinite steps). You passed in -5."
    ) in result.stderr
    assert "Traceback" not in result.stderr and "MisconfigurationException" not in result.stderr


def test_a_lightning_error_after_the_trainer_is_built_keeps_its_traceback(tmp_path, text_corpus, monkeypatch):
    """Only what the Trainer refuses while being built from the arguments is the user's; later it is a bug."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from andrea_lab.cli import main
    from andrea_lab.fit.module import AndreaLM

    def broken(self):
        raise MisconfigurationException("an internal bug")

    monkeypatch.setattr(AndreaLM, "configure_optimizers", broken)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MisconfigurationException, match="an internal bug"):
        main(
            [
                "fit",
                "--config",
                str(REPO / "experiments/quickstart.yaml"),
                *MICRO_OVERRIDES,
                "--data.corpus",
                str(text_corpus),
                "--trainer.max_steps",
                "1",
            ]
        )


def test_version_names_the_installed_andrea_lab(capsys):
    from importlib.metadata import version

    from andrea_lab.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"andrea-lab {version('andrea-lab')}\n"


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`andrea plugins | head -1`: the pipe closes before the output is flushed; no traceback, SIGPIPE's status."""
    child = subprocess.Popen([*ANDREA, "plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
