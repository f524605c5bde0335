"""andrea_lab/runs/handed_hparams.py: a handed checkpoint's settings are plain values, plugins by registered name."""

from __future__ import annotations

import pytest
from jsonargparse import Namespace

from andrea_lab.model.registry import KINDS
from andrea_lab.runs.handed_hparams import (
    HandedClassError,
    check_checkpoint_settings,
    class_specs,
    plugin_names,
    refuse_class_specs,
)

SPEC = {"class_path": "logging.FileHandler", "init_args": {"filename": "x"}}


def test_plain_values_name_no_class():
    plain = {
        "config": {"activation": "andrea-lab:gelu", "n_layer": 2, "norm": None},
        "betas": (0.9, 0.95),
        "optimizer_args": {"momentum": 0.95, "note": "a: b, with a colon", "nested": [{"k": [1, 2]}]},
        "schedule_args": {},
    }
    assert list(class_specs(plain, "hyper_parameters")) == []


@pytest.mark.parametrize(
    "value, path",
    [
        ({"optimizer_args": {"x": SPEC}}, "h.optimizer_args.x.class_path"),
        ({"a": [{"b": [SPEC]}]}, "h.a[0].b[0].class_path"),
        ({"x": "{class_path: logging.FileHandler}"}, "h.x.class_path"),  # jsonargparse parses it as YAML
        ({"x": '{"class_pat\\x68": logging.FileHandler}'}, "h.x.class_path"),  # an escape spells the key
        ({"_class_path": "some.Module", "lr": 1.0}, "h._class_path"),  # LightningCLI's subclass-mode save
        (Namespace(optimizer_args={"x": SPEC}), "h.optimizer_args.x.class_path"),  # a parsed config section
    ],
)
def test_a_class_anywhere_is_found_with_its_key_path(value, path):
    assert [found for found, _ in class_specs(value, "h")][:1] == [path]


def test_the_refusal_is_one_line_naming_the_file_the_path_and_what_is_allowed():
    checkpoint = {"hyper_parameters": {"lr": 1e-3}, "datamodule_hyper_parameters": {"extra": {"y": SPEC}}}
    with pytest.raises(HandedClassError) as refused:
        check_checkpoint_settings(checkpoint, "checkpoint a.ckpt")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "checkpoint a.ckpt: datamodule_hyper_parameters.extra.y.class_path 'logging.FileHandler' names a class"
    )
    assert "plain values" in message
    refuse_class_specs({"lr": 1e-3}, "h", "here", "anything plain")  # nothing to refuse


def test_a_yaml_bomb_in_a_string_stays_a_string():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    assert list(class_specs({"x": bomb}, "h")) == []  # refused by safe_yaml's bounds, not expanded


def test_plugin_names_are_every_kind_the_module_hyperparameters_choose():
    names = plugin_names({"config": {"activation": "gelu", "n_layer": 2}, "optimizer": "muon", "schedule": None})
    assert names["activation"] == "gelu" and names["optimizer"] == "muon" and names["schedule"] is None
    assert "n_layer" not in names
    assert set(names) == set(KINDS)  # every kind the registry has: a new kind is checked when it is added
    assert all(name is None for name in plugin_names({}).values())  # a checkpoint without them names none


def test_settings_nested_past_the_recursion_limit_are_refused_in_one_line():
    deep: list = []
    for _ in range(100_000):  # torch.load's unpickler builds this without recursing; a walk would not
        deep = [deep]
    with pytest.raises(HandedClassError, match=r"^checkpoint a.ckpt: hyper_parameters nests its values too deeply"):
        check_checkpoint_settings({"hyper_parameters": {"x": deep}}, "checkpoint a.ckpt")
