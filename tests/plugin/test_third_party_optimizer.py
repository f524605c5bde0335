"""A third party's optimizer, installed as a (fake) distribution, trains through `andrea fit`; one whose `groups`
leaves a parameter role out is refused in one line before any run directory exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml")

PLUGIN = '''
import torch

from andrea_lab.plugin import Optimizer  # the same class as andrea_lab.model.training_contracts.Optimizer


class SGD(Optimizer):
    """Plain SGD with momentum over andrea's parameter groups (decay as the groups say)."""

    contract_version = 1
    groups = {"sgd": ("matrix", "embedding", "vector")}

    def __init__(self, lr, betas, eps, weight_decay, momentum=0.9):
        super().__init__(lr, betas, eps, weight_decay)
        self.momentum = momentum

    def build(self, groups, fused=True):
        return torch.optim.SGD(groups["sgd"], lr=self.lr, momentum=self.momentum)


class Forgetful(SGD):
    """Forgets the norms' gains and biases."""

    groups = {"sgd": ("matrix", "embedding")}
'''


@pytest.fixture
def sgd_plugins(make_distribution):
    make_distribution(
        "andrea-lab-sgd",
        entry_points={"optimizer": {"sgd": "sgd_plugin:SGD", "forgetful": "sgd_plugin:Forgetful"}},
        files={"sgd_plugin.py": PLUGIN},
    )


def fit(tmp_path: Path, corpus: Path, *overrides: str) -> int:
    return main(
        [
            "fit",
            "--config",
            QUICKSTART,
            *MICRO_OVERRIDES,
            "--trainer.max_steps",
            "3",
            "--heldout.enabled",
            "false",
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "runs"),
            "--data.corpus",
            str(corpus),
            *overrides,
        ]
    )


@pytest.mark.slow  # a real fit, a few seconds
def test_a_third_party_optimizer_trains_through_andrea_fit(sgd_plugins, tmp_path, text_corpus):
    overrides = ["--model.optimizer", "andrea-lab-sgd:sgd", "--model.optimizer_args", "{momentum: 0.8}"]
    assert fit(tmp_path, text_corpus, *overrides) == 0
    (checkpoint,) = (tmp_path / "runs").glob("*/version_0/checkpoints/last.ckpt")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert saved["global_step"] == 3
    assert saved["hyper_parameters"]["optimizer"] == "andrea-lab-sgd:sgd"
    (optimizer_state,) = saved["optimizer_states"]
    groups = optimizer_state["param_groups"]
    assert [group["momentum"] for group in groups] == [0.8, 0.8]  # SGD's, with the plugin's own option
    assert [group["weight_decay"] for group in groups] == [0.1, 0.0]  # the decayed group, then the undecayed
    assert optimizer_state["state"] and all("momentum_buffer" in state for state in optimizer_state["state"].values())


def test_a_plugin_whose_groups_leave_a_role_out_is_refused_before_any_run_directory(
    sgd_plugins, tmp_path, text_corpus, capsys
):
    assert fit(tmp_path, text_corpus, "--model.optimizer", "forgetful") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]  # the other line: ANDREA_LAB_DEBUG's hint
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "leaves parameter role 'vector' without an optimizer" in errors[0]
    assert "each of matrix, embedding, vector must go to exactly one" in errors[0]
    assert not (tmp_path / "runs").exists()
