"""AndreaLM's training arguments: one validated dataclass, built from the saved hyperparameters by name."""

import inspect

import pytest

from andrea_lab import preset
from andrea_lab.fit.args import TrainingArgs
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import ConfigError

#: The module's arguments that are not training arguments.
NOT_TRAINING = {"self", "config", "init_from"}


def test_every_training_argument_of_the_module_is_a_field_and_no_other():
    parameters = set(inspect.signature(AndreaLM.__init__).parameters) - NOT_TRAINING
    assert parameters == set(TrainingArgs.__dataclass_fields__)


def test_the_saved_hyperparameters_are_the_signature_without_init_from():
    module = AndreaLM(config=preset("andrea-micro"), lr=1e-3, betas=[0.8, 0.9])
    assert list(module.hparams) == [
        p for p in inspect.signature(AndreaLM.__init__).parameters if p not in {"self", "init_from"}
    ]
    assert isinstance(module.hparams.config, dict) and module.hparams.betas == (0.8, 0.9)
    assert module.args == TrainingArgs.from_arguments(module.hparams) and module.args.lr == 1e-3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lr": float("nan")}, "lr must be a finite number > 0, got nan"),
        ({"lr": True}, "lr must be a finite number > 0"),
        ({"betas": (0.9,)}, r"betas must be two numbers in \[0, 1\)"),
        ({"z_loss": float("inf")}, "z_loss must be a finite number >= 0"),
        ({"max_skipped_steps": -1}, r"max_skipped_steps must be an integer in \[0, 1e\+12\], got -1"),
        # 1e21 steps were accepted and overflowed the int64 columns of `andrea compare`'s tables.
        ({"warmup_steps": 10**21}, r"warmup_steps must be an integer in \[0, 1e\+12\], got 1000000000000000000000"),
        ({"warmup_steps": 1e21}, r"warmup_steps must be an integer in \[0, 1e\+12\], got 1e\+21"),
        ({"decay_steps": 10**13}, r"decay_steps must be an integer in \[1, 1e\+12\] or null"),
        ({"compile": "yes"}, "compile must be true or false, got 'yes'"),
    ],
)
def test_a_bad_value_is_one_error_naming_it(change, message):
    good = dict(
        lr=1e-3,
        warmup_steps=0,
        decay_steps=None,
        min_lr_ratio=0.1,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        eps=1e-8,
        on_nonfinite="stop",
        max_skipped_steps=1,
        compile=False,
        z_loss=0.0,
    )
    TrainingArgs(**good)
    with pytest.raises(ConfigError, match=message):
        TrainingArgs(**{**good, **change})


def test_every_argument_reaches_the_training_args_by_name():
    """Passed by name, not through ``locals()``: a value given to AndreaLM is the value it trains with."""
    given = dict(
        lr=2e-3,
        warmup_steps=7,
        decay_steps=99,
        min_lr_ratio=0.2,
        weight_decay=0.05,
        betas=(0.8, 0.9),
        beta2=0.9,  # equal to betas[1], so betas reads back as given
        eps=1e-7,
        on_nonfinite="skip",
        max_skipped_steps=3,
        compile=False,
        z_loss=1e-4,
        optimizer="muon",
        schedule="wsd",
        optimizer_args={"momentum": 0.9},
        schedule_args={"decay_fraction": 0.3},
    )
    assert set(given) == set(TrainingArgs.__dataclass_fields__)
    module = AndreaLM(config=preset("andrea-micro"), **given)
    assert {name: getattr(module.args, name) for name in given} == given
    source = inspect.getsource(AndreaLM.__init__)
    assert "locals()" not in source and "vars()" not in source


def test_modules_built_without_a_config_share_only_a_frozen_value():
    import dataclasses

    a, b = AndreaLM(config=preset("andrea-micro")), AndreaLM(config=preset("andrea-micro"))
    default = inspect.signature(AndreaLM.__init__).parameters["config"].default
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.d_model = 8  # the default cannot be changed for the modules built after
    assert a.config == b.config
