"""AndreaConfig <-> GPT2Config: what each side can express of the other, and the refusals.

A ``transformers`` GPT-2 is pre-norm, has biases in every linear layer and LayerNorm, an ungated MLP
of width ``n_inner`` (default 4·n_embd) and one of a fixed set of activations. An ANDREA config maps
onto it exactly when it is built from andrea-lab's own ``pre`` placement, ``layernorm`` norm and ``gelu``
(tanh approximation) or ``relu`` activation, with biases and without QK norm; anything else (post-norm,
peri/reordered/deepnorm, RMSNorm, QK norm, SwiGLU, no biases, a third-party plugin) computes a function GPT2LMHeadModel
cannot, and is refused with every such field
named at once, rather than exported into a directory that loads and silently computes something else.
"""

from __future__ import annotations

from typing import Any, Optional

from andrea_lab.errors import UsageError
from andrea_lab.model.builtin.activations import GELU, ReLU
from andrea_lab.model.builtin.norms import LayerNorm
from andrea_lab.model.builtin.placements import PreNorm
from andrea_lab.model.components import mlp_hidden
from andrea_lab.model.config import AndreaConfig, ConfigError, mlp_hidden_size
from andrea_lab.model.registry import PluginError, resolve

#: ANDREA's activation classes and the GPT2Config ``activation_function`` that computes the same.
#: ``gelu_new`` is GPT-2's own name for the tanh GELU, which every GPT-2 consumer knows.
EXPORTED_ACTIVATIONS: dict[type, str] = {GELU: "gelu_new", ReLU: "relu"}

#: GPT2Config activations ANDREA computes, and the ANDREA activation for each. The four tanh-GELU
#: names are one function (transformers' own implementations of the same formula).
IMPORTED_ACTIVATIONS: dict[str, str] = {
    "gelu_new": "andrea-lab:gelu",
    "gelu_pytorch_tanh": "andrea-lab:gelu",
    "gelu_python_tanh": "andrea-lab:gelu",
    "gelu_fast": "andrea-lab:gelu",
    "relu": "andrea-lab:relu",
}

#: What an export needs of a config, said once in every refusal.
EXPORTABLE = (
    "norm_placement pre, norm layernorm, qk_norm false, activation gelu (tanh) or relu, bias true, "
    "tie_embeddings true, embedding_scale 1, attn_logit_softcap and final_logit_softcap null; any size, context, "
    "vocabulary and mlp_ratio"
)

#: GPT-2 architectures whose weights are the language model (GPT2Model: the same trunk, tied head).
IMPORTABLE_ARCHITECTURES = ("GPT2LMHeadModel", "GPT2Model")


class NotExportableError(UsageError):
    """An ANDREA variant that GPT2Config cannot express (exit status 2)."""


class NotImportableError(UsageError):
    """A Hugging Face directory that is not a GPT-2 ANDREA can compute (exit status 2)."""


def _plugin(kind: str, name: str) -> Optional[type]:
    """The class a plugin name selects here, or None when it does not resolve (not installed)."""
    try:
        return resolve(kind, name)
    except PluginError:
        return None


def unexportable_fields(config: AndreaConfig) -> list[str]:
    """Each field of ``config`` that GPT2Config cannot express, as ``field value (why)``; empty if none."""
    problems = []
    placement = _plugin("norm_placement", config.norm_placement)
    if placement is not PreNorm:
        why = "not installed here" if placement is None else "GPT-2 is andrea-lab's pre-norm, x + f(LN(x))"
        problems.append(f"norm_placement {config.norm_placement!r} ({why})")
    activation = _plugin("activation", config.activation)
    if activation not in EXPORTED_ACTIVATIONS:
        why = (
            "not installed here"
            if activation is None
            else "GPT-2's activation_function has andrea-lab's gelu (tanh) and relu, ungated"
        )
        problems.append(f"activation {config.activation!r} ({why})")
    norm = _plugin("norm", config.norm)
    if norm is not LayerNorm:
        why = "not installed here" if norm is None else "GPT-2's norms are LayerNorms"
        problems.append(f"norm {config.norm!r} ({why})")
    if config.qk_norm:
        problems.append("qk_norm True (GPT-2 has no norm on queries and keys)")
    if not config.bias:
        problems.append("bias False (GPT-2 has a bias in every linear layer and LayerNorm)")
    if not config.tie_embeddings:
        problems.append("tie_embeddings False (this exporter writes GPT-2's head tied to wte)")
    if config.embedding_scale != 1:
        problems.append(f"embedding_scale {config.embedding_scale!r} (GPT-2 adds its embeddings unscaled)")
    for cap in ("attn_logit_softcap", "final_logit_softcap"):
        if getattr(config, cap) is not None:
            problems.append(f"{cap} {getattr(config, cap)!r} (GPT2Config has no soft cap of the logits)")
    return problems


def check_exportable(config: AndreaConfig) -> None:
    """Raise one :class:`NotExportableError` naming every field GPT2Config cannot express."""
    problems = unexportable_fields(config)
    if problems:
        raise NotExportableError(
            f"this ANDREA variant cannot be exported as a transformers GPT-2: "
            f"{'; '.join(problems)}. Exportable: {EXPORTABLE}"
        )


def gpt2_config_kwargs(config: AndreaConfig, eot_id: Optional[int]) -> dict[str, Any]:
    """GPT2Config arguments for an exportable ``config``; bos/eos are the tokenizer's ``<|endoftext|>``."""
    check_exportable(config)
    hidden = mlp_hidden(config)
    return dict(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=None if hidden == 4 * config.d_model else hidden,
        activation_function=EXPORTED_ACTIVATIONS[resolve("activation", config.activation)],
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.init_std,
        tie_word_embeddings=True,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
    )


def _unsupported_options(gpt2: Any) -> list[str]:
    """Each GPT-2 option set to something ANDREA does not compute, as ``name value (why)``."""
    checks = [
        (
            "activation_function",
            gpt2.activation_function in IMPORTED_ACTIVATIONS,
            f"valid: {', '.join(IMPORTED_ACTIVATIONS)}",
        ),
        (
            "scale_attn_by_inverse_layer_idx",
            not gpt2.scale_attn_by_inverse_layer_idx,
            "ANDREA scales by 1/sqrt(head size) only",
        ),
        (
            "reorder_and_upcast_attn",
            not gpt2.reorder_and_upcast_attn,
            "ANDREA's attention is scaled_dot_product_attention",
        ),
        ("scale_attn_weights", gpt2.scale_attn_weights, "ANDREA always scales attention by 1/sqrt(head size)"),
        ("add_cross_attention", not gpt2.add_cross_attention, "ANDREA is decoder-only"),
        ("tie_word_embeddings", gpt2.tie_word_embeddings, "ANDREA's output head is the token embedding"),
    ]
    return [f"{name} {getattr(gpt2, name)!r} ({why})" for name, ok, why in checks if not ok]


def _mlp_ratio(gpt2: Any) -> tuple[Optional[float], Optional[str]]:
    """ANDREA's ``mlp_ratio`` for GPT-2's ``n_inner`` (None: the default 4x), or why there is none."""
    n_inner = gpt2.n_inner
    if n_inner is None or n_inner == 4 * gpt2.n_embd:
        return None, None
    ratio = n_inner / gpt2.n_embd
    if mlp_hidden_size(gpt2.n_embd, ratio) != n_inner:
        return None, f"n_inner {n_inner!r} (ANDREA's MLP width is a multiple of 8)"
    return ratio, None


def andrea_config_from_gpt2(gpt2: Any, origin: str) -> AndreaConfig:
    """The AndreaConfig that computes what ``gpt2`` (a GPT2Config) does, or one error naming every option
    that stands in the way. ``origin`` names the config file in messages."""
    if getattr(gpt2, "model_type", None) != "gpt2":
        raise NotImportableError(
            f"{origin} has model_type {getattr(gpt2, 'model_type', None)!r}; andrea imports "
            f"GPT-2 models only (model_type 'gpt2')"
        )
    other = [name for name in (getattr(gpt2, "architectures", None) or []) if name not in IMPORTABLE_ARCHITECTURES]
    problems = [f"architectures {other!r} (importable: {', '.join(IMPORTABLE_ARCHITECTURES)})"] if other else []
    problems += _unsupported_options(gpt2)
    ratio, ratio_problem = _mlp_ratio(gpt2)
    problems += [ratio_problem] if ratio_problem else []
    if problems:
        raise NotImportableError(f"{origin} uses GPT-2 options ANDREA does not compute: {'; '.join(problems)}")
    try:
        return AndreaConfig(
            vocab_size=gpt2.vocab_size,
            block_size=gpt2.n_positions,
            d_model=gpt2.n_embd,
            n_layer=gpt2.n_layer,
            n_head=gpt2.n_head,
            mlp_ratio=ratio,
            norm_placement="andrea-lab:pre",
            activation=IMPORTED_ACTIVATIONS[gpt2.activation_function],
            bias=True,
            dropout=float(gpt2.resid_pdrop),
            layer_norm_eps=float(gpt2.layer_norm_epsilon),
            init_std=float(gpt2.initializer_range),
        )
    except ConfigError as exc:
        raise NotImportableError(f"{origin}: {exc}") from None
