import ast
import dataclasses
from pathlib import Path

import pytest

from andrea_lab.model.builtin.activations import GELU
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.placements import PreNorm
from andrea_lab.model.components import (
    architecture_differences,
    check_same_architecture,
    mlp_hidden,
    resolve_components,
    resolved_mlp_ratio,
)
from andrea_lab.model.config import PLUGIN_FIELDS, PRESETS, AndreaConfig, ConfigError, mlp_hidden_size, preset
from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.model.registry import PluginError, resolve

CONFIG_SOURCE = Path(__file__).resolve().parents[2] / "andrea_lab" / "model" / "config.py"


def test_defaults_are_the_120m_spec():
    c = AndreaConfig()
    assert (c.vocab_size, c.d_model, c.n_layer, c.n_head, c.block_size) == (8449, 768, 12, 12, 1024)
    # Qualified, so that the defaults keep selecting the built-ins when another distribution
    # registers the same names (tests/plugin/test_third_party_plugins.py installs one).
    assert (c.norm_placement, c.activation, c.kernel_backend, c.norm, c.qk_norm, c.bias) == (
        "andrea-lab:pre",
        "andrea-lab:gelu",
        "andrea-lab:torch",
        "andrea-lab:layernorm",
        False,
        True,
    )
    assert mlp_hidden(c) == 3072 and c.head_size == 64


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds(name):
    assert preset(name).d_model % preset(name).n_head == 0


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("d_model", 0, "d_model must be a positive integer, got 0"),
        ("n_layer", -1, "n_layer must be a positive integer, got -1"),
        ("vocab_size", 2.5, "vocab_size must be a positive integer"),
        ("block_size", True, "block_size must be a positive integer"),
        ("mlp_ratio", 0.0, "mlp_ratio must be a number > 0"),
        ("mlp_ratio", float("nan"), "mlp_ratio must be a number > 0"),
        ("dropout", 1.0, "dropout must be in [0, 1)"),
        ("layer_norm_eps", 0.0, "layer_norm_eps must be a finite number > 0"),
        ("layer_norm_eps", float("inf"), "layer_norm_eps must be a finite number > 0, got inf"),
        ("init_std", float("inf"), "init_std must be a finite number > 0, got inf"),
        (
            "attn_logit_softcap",
            0.0,
            "attn_logit_softcap must be a finite number > 0 (e.g. 50) or null for no cap, got 0.0",
        ),
        ("attn_logit_softcap", float("inf"), "attn_logit_softcap must be a finite number > 0"),
        (
            "final_logit_softcap",
            -30.0,
            "final_logit_softcap must be a finite number > 0 (e.g. 30) or null for no cap, got -30.0",
        ),
        ("final_logit_softcap", float("nan"), "got nan"),
        ("qk_norm", "maybe", "qk_norm must be true or false, got 'maybe'"),
        ("qk_norm", 1, "qk_norm must be true or false, got 1"),
        ("norm", "", "norm must be a plugin name (e.g. 'andrea-lab:layernorm')"),
        (
            "embedding_scale",
            0.0,
            "embedding_scale must be a number in [0.001, 1000] (1 = GPT-2; Gemma: sqrt(d_model)), got 0.0",
        ),
        ("embedding_scale", float("inf"), "embedding_scale must be a number in [0.001, 1000]"),
        # Finite but every logit inf: `andrea generate` on such a checkpoint died in torch.multinomial.
        (
            "embedding_scale",
            1e300,
            "embedding_scale must be a number in [0.001, 1000] (1 = GPT-2; Gemma: sqrt(d_model)), got 1e+300",
        ),
        ("embedding_scale", True, "got True"),
        ("embedding_scale", "8", "got '8'"),
    ],
)
def test_invalid_values_are_named(field, value, fragment):
    with pytest.raises(ConfigError, match=None) as info:
        AndreaConfig(**{field: value})
    assert fragment in str(info.value)


def test_heads_must_divide_d_model_and_valid_choices_are_listed():
    with pytest.raises(ConfigError) as info:
        AndreaConfig(d_model=100, n_head=12)
    message = str(info.value)
    assert "d_model (100) must be divisible by n_head (12)" in message
    assert "4, 5, 10" in message


@pytest.mark.parametrize(
    "kind,installed",
    [
        ("activation", ["gelu", "relu", "swiglu"]),
        ("norm_placement", ["post", "pre"]),
        ("kernel_backend", ["torch"]),
        ("norm", ["layernorm", "rmsnorm"]),
    ],
)
def test_unknown_plugin_name_lists_installed_ones(kind, installed):
    config = AndreaConfig(**{kind: "no_such_variant"})  # names are selected when the model is built
    with pytest.raises(PluginError) as info:
        resolve_components(config)
    message = str(info.value)
    assert "'no_such_variant'" in message and f"andrea_lab.{kind}" in message
    for name in installed:
        assert name in message


def test_components_are_the_classes_the_names_select():
    components = resolve_components(AndreaConfig())
    assert (components.norm_placement, components.activation, components.kernel_backend) == (
        PreNorm,
        GELU,
        TorchBackend,
    )


def test_building_a_config_loads_no_plugin():
    resolve.cache_clear()
    AndreaConfig(activation="not_installed_anywhere", norm_placement="nor_this")
    assert resolve.cache_info().misses == 0


@pytest.mark.parametrize("kind", ["norm_placement", "activation", "kernel_backend"])
@pytest.mark.parametrize("value", ["", "  ", None, 3])
def test_a_plugin_field_must_be_a_name(kind, value):
    with pytest.raises(ConfigError, match=f"{kind} must be a plugin name .*got {value!r}"):
        AndreaConfig(**{kind: value})


def test_mlp_ratio_defaults_to_the_activation():
    assert resolved_mlp_ratio(AndreaConfig(activation="gelu")) == 4
    assert resolved_mlp_ratio(AndreaConfig(activation="swiglu")) == pytest.approx(8 / 3)
    assert mlp_hidden(AndreaConfig(activation="swiglu", mlp_ratio=2.0)) == 1536


def test_hidden_size_rounds_to_nearest_multiple_of_8():
    assert mlp_hidden_size(768, 8 / 3) == 2048  # exact
    assert mlp_hidden_size(128, 8 / 3) == 344  # 341.33 -> 344
    assert mlp_hidden_size(100, 4.0) == 400
    assert mlp_hidden_size(4, 0.5) == 8  # never below one multiple


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'andrea-7b'; valid presets: andrea-120m"):
        preset("andrea-7b")


def test_an_attention_cap_refuses_attention_dropout():
    with pytest.raises(ConfigError, match="attn_logit_softcap 50.0 with dropout 0.1: .* set dropout 0"):
        AndreaConfig(attn_logit_softcap=50.0, dropout=0.1)
    assert AndreaConfig(final_logit_softcap=30.0, dropout=0.1).final_logit_softcap == 30.0


def test_a_config_is_a_frozen_value():
    c = preset("andrea-micro")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.activation = "andrea-lab:relu"
    assert c == preset("andrea-micro") and hash(c) == hash(preset("andrea-micro"))
    assert dataclasses.replace(c, activation="relu").activation == "relu" and c.activation == "andrea-lab:gelu"
    assert vars(c).keys() == {f.name for f in dataclasses.fields(AndreaConfig)}  # no resolved class kept on it


def test_the_config_imports_nothing_of_the_plugin_system():
    tree = ast.parse(CONFIG_SOURCE.read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {name for name in imported if name and name.startswith("andrea_lab")} == {"andrea_lab.errors"}
    assert PLUGIN_FIELDS == PLUGIN_KINDS


def test_the_architecture_diff_names_each_field_and_accepts_the_same_plugin_spelled_otherwise():
    c = preset("andrea-micro")
    assert architecture_differences(c, None) == []
    assert architecture_differences(c, {**c.to_dict(), "norm_placement": "pre", "dropout": 0.5}) == []
    assert architecture_differences(
        c, {"d_model": 32, "vocab_size": 257, "block_size": 64, "n_layer": 2, "n_head": 2}
    ) == ["d_model: checkpoint 32, config 64"]
    with pytest.raises(ConfigError, match=r"different architecture than model.config \(qk_norm: checkpoint True"):
        check_same_architecture(c, {**c.to_dict(), "qk_norm": True})
