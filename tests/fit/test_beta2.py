"""``model.beta2``: β2 alone, so that a suite's ``search:`` can tune it (a search key is one number and
``model.betas`` a pair). It replaces ``betas[1]`` in what the optimizer gets, wins over ``betas``, is checked in
one line, and is recorded in the saved hyperparameters and config.yaml like every argument."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from andrea_testing import MICRO_OVERRIDES, QUICKSTART

from andrea_lab.cli import main as cli_main
from andrea_lab.experiments.sweep.search import fit_refusal, parse_search
from andrea_lab.fit.args import TrainingArgs
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import ConfigError, preset


def optimizer_of(module: AndreaLM) -> torch.optim.Optimizer:
    """The optimizer the module's configure_optimizers builds (unfused: CPU), over its parameter groups."""
    optimizer, _, _ = module.optimizer_choice.build(module.model, decay_steps=10, fused=False)
    return optimizer


@pytest.mark.parametrize("optimizer", ["adamw", "adamw_independent_wd", "schedule_free"])
def test_beta2_replaces_betas_second_number_in_every_param_group(optimizer):
    module = AndreaLM(config=preset("andrea-micro"), optimizer=optimizer, beta2=0.99)
    groups = optimizer_of(module).param_groups
    assert groups and [group["betas"] for group in groups] == [(0.9, 0.99)] * len(groups)


def test_beta2_reaches_muons_adamw_part_and_not_its_muon_part():
    module = AndreaLM(config=preset("andrea-micro"), optimizer="muon", beta2=0.99)
    groups = optimizer_of(module).param_groups
    adamw = [group for group in groups if "betas" in group]
    assert adamw and len(adamw) < len(groups)  # the Muon part's groups have a momentum, no betas
    assert [group["betas"] for group in adamw] == [(0.9, 0.99)] * len(adamw)


def test_lions_own_betas_are_not_model_beta2():
    """Lion takes ``optimizer_args.lion_betas``, not ``model.betas`` (docs/optimizers.md), so not beta2 either."""
    module = AndreaLM(config=preset("andrea-micro"), optimizer="lion", beta2=0.5)
    groups = optimizer_of(module).param_groups
    assert groups and [tuple(group["betas"]) for group in groups] == [(0.9, 0.99)] * len(groups)


def test_without_beta2_the_optimizer_gets_betas_as_given():
    module = AndreaLM(config=preset("andrea-micro"), betas=(0.8, 0.9))
    assert {tuple(group["betas"]) for group in optimizer_of(module).param_groups} == {(0.8, 0.9)}
    assert module.hparams.beta2 is None


def test_beta2_wins_over_betas_and_both_are_recorded():
    module = AndreaLM(config=preset("andrea-micro"), betas=(0.8, 0.95), beta2=0.99)
    assert {tuple(group["betas"]) for group in optimizer_of(module).param_groups} == {(0.8, 0.99)}
    assert module.hparams.betas == (0.8, 0.99) and module.hparams.beta2 == 0.99  # what it trained with
    rebuilt = AndreaLM(**module.hparams)  # as from_checkpoint rebuilds it
    assert rebuilt.args == module.args


def test_a_checkpoint_from_before_beta2_loads_with_its_betas():
    module = AndreaLM(config=preset("andrea-micro"), betas=(0.8, 0.9))
    older = {name: value for name, value in module.hparams.items() if name != "beta2"}
    assert TrainingArgs.from_arguments(older) == module.args


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), float("inf"), True, "0.99"])
def test_a_bad_beta2_is_one_error_naming_it(value):
    with pytest.raises(ConfigError, match=r"^beta2 must be a number in \[0, 1\) or null, got ") as error:
        AndreaLM(config=preset("andrea-micro"), beta2=value)
    assert repr(value) in str(error.value) and "\n" not in str(error.value)


def test_a_search_may_tune_beta2_by_itself():
    """What model.beta2 is for: one number per key, which the sweep's preflight finds in the fit's parser."""
    declared = {
        "base": {"model.beta2": 0.95},
        "keys": {"model.beta2": [0.9, 0.95, 0.99]},
        "budget": 5,
        "tuning_seeds": [0],
        "judged_seeds": [100],
    }
    search = parse_search(declared, "variants.adamw.search", {"model.beta2"})
    assert fit_refusal(search, ["--model.optimizer", "adamw"]) is None


@pytest.mark.slow  # a real fit, a few seconds
def test_andrea_fit_model_beta2_takes_a_step_with_it_and_records_it(tmp_path: Path, text_corpus):
    overrides = [*MICRO_OVERRIDES, "--trainer.max_steps", "1", "--heldout.enabled", "false"]
    runs = ["--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--data.corpus", str(text_corpus)]
    assert cli_main(["fit", "--config", QUICKSTART, *overrides, *runs, "--model.beta2", "0.99"]) == 0
    (run,) = (tmp_path / "runs").glob("*/version_0")
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 1
    (optimizer_state,) = saved["optimizer_states"]
    assert optimizer_state["state"]  # the step was taken: AdamW holds its moments
    assert {tuple(group["betas"]) for group in optimizer_state["param_groups"]} == {(0.9, 0.99)}
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert config["model"]["beta2"] == 0.99 and config["model"]["betas"] == [0.9, 0.95]
