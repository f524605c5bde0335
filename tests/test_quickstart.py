"""The README's first command is a first result in minutes on 2 cores: ``experiments/quickstart.yaml`` is sized
for that by its training FLOPs (counted from the model, nothing timed), and the longer quickstart stays beside it,
named in the README. Both still take a step on the CPU at tiny size in tests/test_experiments.py."""

from __future__ import annotations

from pathlib import Path

from andrea_lab.commands.params import config_from_yaml
from andrea_lab.fit.cpu_cost import FLOPS_PER_PARAMETER_TOKEN
from andrea_lab.inside.params import parameter_breakdown
from andrea_lab.safe_yaml import read_yaml

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "experiments" / "quickstart.yaml"
LONG = REPO / "experiments" / "quickstart-long.yaml"
#: The 600-step quickstart (14 TFLOP by this count) took 365 s of fit on 2 shared cores (README, 2026-12-03):
#: a third of that leaves the first result, set-up included, inside 5 minutes.
FIRST_RUN_TFLOP = 5.0
#: Fewer steps than this and the held-out loss is still near the unigram level: no result to read.
MIN_STEPS = 150


def training_tflop(path: Path) -> float:
    """6 x parameters x tokens per step x steps: the floor of what the fit costs (attention's own left out)."""
    config = read_yaml(path, "config file")
    trainer, data = config["trainer"], config["data"]
    parameters = parameter_breakdown(config_from_yaml(str(path))).total
    tokens_per_step = data["batch_size"] * config["model"]["config"]["block_size"]
    return FLOPS_PER_PARAMETER_TOKEN * parameters * tokens_per_step * trainer["max_steps"] / 1e12


def test_the_first_run_is_sized_for_minutes_and_trains_long_enough_to_read():
    config = read_yaml(QUICKSTART, "config file")
    steps, every = config["trainer"]["max_steps"], config["trainer"]["val_check_interval"]
    assert training_tflop(QUICKSTART) <= FIRST_RUN_TFLOP, training_tflop(QUICKSTART)
    assert steps >= MIN_STEPS and steps % every == 0 and steps // every >= 3, (steps, every)
    assert config.get("heldout", {}).get("enabled", True), "the first result is the held-out loss"


def test_the_longer_quickstart_is_the_same_model_trained_longer_in_its_own_experiment():
    short, long = read_yaml(QUICKSTART, "config file"), read_yaml(LONG, "config file")
    assert long["model"] == short["model"] and long["data"] == short["data"]
    assert long["trainer"]["max_steps"] > short["trainer"]["max_steps"]
    names = {c["trainer"]["logger"]["init_args"]["name"] for c in (short, long)}
    assert len(names) == 2, "a longer run in the same experiment would be compared as a variant of the short one"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "experiments/quickstart-long.yaml" in readme
