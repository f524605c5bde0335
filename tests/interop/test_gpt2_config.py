"""AndreaConfig <-> GPT2Config: what maps, and one refusal naming every field that does not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config
from transformers.activations import ACT2FN

from andrea_lab.interop.gpt2_config import (
    IMPORTED_ACTIVATIONS,
    NotExportableError,
    NotImportableError,
    andrea_config_from_gpt2,
    gpt2_config_kwargs,
    unexportable_fields,
)
from andrea_lab.model.config import preset


def test_andrea_120m_maps_to_gpt2_small_with_its_own_end_of_text():
    kwargs = gpt2_config_kwargs(preset("andrea-120m"), eot_id=8448)
    assert kwargs["vocab_size"] == 8449 and kwargs["n_positions"] == 1024 and kwargs["n_embd"] == 768
    assert kwargs["n_layer"] == 12 and kwargs["n_head"] == 12 and kwargs["n_inner"] is None
    assert kwargs["activation_function"] == "gelu_new" and kwargs["layer_norm_epsilon"] == 1e-5
    assert kwargs["bos_token_id"] == kwargs["eos_token_id"] == 8448 and kwargs["tie_word_embeddings"]


def test_relu_and_another_mlp_ratio_are_expressed_by_activation_function_and_n_inner():
    kwargs = gpt2_config_kwargs(preset("andrea-micro", activation="relu", mlp_ratio=3.0), eot_id=256)
    assert kwargs["activation_function"] == "relu" and kwargs["n_inner"] == 192


@pytest.mark.parametrize("name", sorted(name for name, ours in IMPORTED_ACTIVATIONS.items() if ours.endswith("gelu")))
def test_each_imported_gelu_name_is_andreas_tanh_gelu(name):
    x = torch.linspace(-8, 8, 10001)
    assert (ACT2FN[name](x) - F.gelu(x, approximate="tanh")).abs().max() < 1e-6
    # ... and the exact (erf) GELU is not: a wrong table entry would fail the line above.
    assert (ACT2FN["gelu"](x) - F.gelu(x, approximate="tanh")).abs().max() > 1e-4


def test_one_refusal_names_every_field_gpt2_cannot_express():
    config = preset("andrea-micro", norm_placement="post", activation="swiglu", bias=False)
    assert len(unexportable_fields(config)) == 3
    with pytest.raises(NotExportableError) as caught:
        gpt2_config_kwargs(config, eot_id=256)
    message = str(caught.value)
    for fragment in ("norm_placement 'post'", "activation 'swiglu'", "bias False", "Exportable: norm_placement pre"):
        assert fragment in message
    assert caught.value.exit_status == 2


def test_soft_caps_are_refused_by_name():
    problems = unexportable_fields(preset("andrea-micro", attn_logit_softcap=50.0, final_logit_softcap=30.0))
    assert problems == [
        "attn_logit_softcap 50.0 (GPT2Config has no soft cap of the logits)",
        "final_logit_softcap 30.0 (GPT2Config has no soft cap of the logits)",
    ]


def test_third_party_plugins_and_no_residual_are_refused():
    problems = unexportable_fields(preset("andrea-micro", activation="squared_relu", norm_placement="no_residual"))
    assert problems[0].startswith("norm_placement 'no_residual'") and problems[1].startswith(
        "activation 'squared_relu'"
    )
    assert "not installed here" in unexportable_fields(preset("andrea-micro", activation="mish"))[0]


def test_gpt2_maps_back_to_the_same_andrea_config():
    config = preset("andrea-micro", activation="relu", mlp_ratio=3.0, dropout=0.1)
    back = andrea_config_from_gpt2(GPT2Config(**gpt2_config_kwargs(config, eot_id=256)), "config.json")
    assert back.to_dict() == {**config.to_dict(), "norm_placement": "andrea-lab:pre", "activation": "andrea-lab:relu"}


@pytest.mark.parametrize(
    "option, value, fragment",
    [
        ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx True"),
        ("reorder_and_upcast_attn", True, "reorder_and_upcast_attn True"),
        ("activation_function", "gelu", "activation_function 'gelu' (valid: gelu_new, gelu_pytorch_tanh"),
        ("n_inner", 100, "n_inner 100 (ANDREA's MLP width is a multiple of 8)"),
        ("tie_word_embeddings", False, "tie_word_embeddings False"),
        ("add_cross_attention", True, "add_cross_attention True"),
        ("scale_attn_weights", False, "scale_attn_weights False"),
    ],
)
def test_gpt2_options_andrea_lacks_are_named(option, value, fragment):
    with pytest.raises(NotImportableError, match="config.json uses GPT-2 options ANDREA does not compute") as caught:
        andrea_config_from_gpt2(GPT2Config(**{option: value}), "config.json")
    assert fragment in str(caught.value)


def test_every_unsupported_option_is_named_at_once_and_other_models_are_refused():
    with pytest.raises(NotImportableError) as caught:
        andrea_config_from_gpt2(GPT2Config(scale_attn_by_inverse_layer_idx=True, activation_function="silu"), "c.json")
    assert "activation_function 'silu'" in str(caught.value) and "scale_attn_by_inverse_layer_idx" in str(caught.value)
    other = GPT2Config()
    other.model_type = "llama"
    with pytest.raises(NotImportableError, match="c.json has model_type 'llama'; andrea imports GPT-2 models only"):
        andrea_config_from_gpt2(other, "c.json")
    with pytest.raises(NotImportableError, match=r"architectures \['GPT2ForSequenceClassification'\]"):
        andrea_config_from_gpt2(GPT2Config(architectures=["GPT2ForSequenceClassification"]), "c.json")
    with pytest.raises(NotImportableError, match="c.json: d_model .30. must be divisible by n_head .4."):
        andrea_config_from_gpt2(GPT2Config(n_embd=30, n_head=4), "c.json")


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(norm="rmsnorm"), "norm 'rmsnorm' (GPT-2's norms are LayerNorms)"),
        (dict(qk_norm=True), "qk_norm True (GPT-2 has no norm on queries and keys)"),
        (dict(tie_embeddings=False), "tie_embeddings False (this exporter writes GPT-2's head tied to wte)"),
        (dict(norm_placement="peri"), "norm_placement 'peri'"),
        (dict(norm_placement="reordered"), "norm_placement 'reordered'"),
        (dict(norm_placement="deepnorm"), "norm_placement 'deepnorm'"),
        (dict(embedding_scale=8.0), "embedding_scale 8.0 (GPT-2 adds its embeddings unscaled)"),
    ],
)
def test_the_stability_interventions_are_refused_naming_each(overrides, fragment):
    with pytest.raises(NotExportableError) as caught:
        gpt2_config_kwargs(preset("andrea-micro", **overrides), eot_id=256)
    assert fragment in str(caught.value) and "norm layernorm, qk_norm false" in str(caught.value)
