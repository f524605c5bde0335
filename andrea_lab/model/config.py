"""AndreaConfig: every architectural choice of ANDREA as one typed, serialisable dataclass.

The field defaults *are* the ANDREA-120M spec (``shared/design/ANDREA.md``), so an empty config is
the full model and a YAML only lists what it changes. Components are stored as names (strings)
and resolved through the plugin registry once, when the model is built (andrea_lab.model.components),
which keeps the config serialisable into YAML, checkpoints and TensorBoard hparams. The config is a frozen
leaf: it imports nothing of the plugin system, holds no resolved class, and building or validating one never
loads a plugin. A changed config is a new one (``dataclasses.replace``).

The defaults name the built-ins qualified by their distribution (``andrea-lab:pre``), so they keep
selecting andrea-lab's own plugins when another installed distribution registers the same name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

from andrea_lab.errors import UsageError

#: The fields that name a plugin, one per plugin kind (the same tuple as ``contracts.PLUGIN_KINDS``, spelled
#: here so that the config needs nothing of the plugin system; tests/model/test_config.py holds them equal).
PLUGIN_FIELDS = ("norm_placement", "activation", "kernel_backend", "norm")

#: The hidden size of the MLP is rounded to a multiple of this, so that the matrices tile well on
#: tensor cores and vector units. At ratio 4 (any d_model) and 8/3 with d_model a multiple of 24
#: (e.g. 768 → 2048) the rounding changes nothing.
MLP_HIDDEN_MULTIPLE = 8


class ConfigError(UsageError):
    """An invalid model configuration; the message names the field, the value and what is valid."""


def mlp_hidden_size(d_model: int, mlp_ratio: float) -> int:
    """``mlp_ratio · d_model`` rounded to the nearest multiple of :data:`MLP_HIDDEN_MULTIPLE` (at least one).

    Rounding to the *nearest* multiple (not up) keeps a SwiGLU MLP at 8/3 as close as possible to
    the parameter count of a GELU MLP at 4×: for d_model 128, 341.3 → 344 (+0.8 %).
    """
    exact = mlp_ratio * d_model
    return max(MLP_HIDDEN_MULTIPLE, MLP_HIDDEN_MULTIPLE * round(exact / MLP_HIDDEN_MULTIPLE))


#: The embedding multipliers a config may give: Gemma's sqrt(d_model) is 111 at d_model 12288; a checkpoint
#: saying 1e300 made every logit inf and `andrea generate` die in torch.multinomial.
EMBEDDING_SCALE_RANGE = (1e-3, 1e3)


@dataclass(frozen=True)
class AndreaConfig:
    """The architecture of an ANDREA model. Defaults: ANDREA-120M exactly as specified."""

    vocab_size: int = 8449
    """Token ids: 256 bytes + 8192 BPE merges + 1 end-of-text (must match the tokenizer)."""
    block_size: int = 1024
    """Context length: the number of learned position embeddings."""
    d_model: int = 768
    """Width of the residual stream."""
    n_layer: int = 12
    """Number of transformer blocks."""
    n_head: int = 12
    """Attention heads; d_model must be divisible by it."""
    mlp_ratio: Optional[float] = None
    """MLP hidden size ÷ d_model; None takes the activation's default (4, or 8/3 if gated)."""
    norm_placement: str = "andrea-lab:pre"
    """Plugin from entry-point group andrea_lab.norm_placement: a name (pre, post, no_residual), or
    distribution:name (andrea-lab:pre) when several distributions register it."""
    activation: str = "andrea-lab:gelu"
    """Plugin from entry-point group andrea_lab.activation: a name (gelu, relu, swiglu), or
    distribution:name (andrea-lab:gelu)."""
    kernel_backend: str = "andrea-lab:torch"
    """Plugin from entry-point group andrea_lab.kernel_backend: a name (torch), or distribution:name."""
    norm: str = "andrea-lab:layernorm"
    """Plugin from entry-point group andrea_lab.norm: every norm of the model (the placement's, the final
    one, the QK norm): a name (layernorm, rmsnorm), or distribution:name (andrea-lab:layernorm)."""
    qk_norm: bool = False
    """Normalise queries and keys per head (over the head size) with the norm plugin before q·kᵀ
    (Dehghani et al. 2023, OLMo 2): bounds the attention logits, which otherwise grow at high LR."""
    bias: bool = True
    """Biases in every linear layer and LayerNorm (GPT-2 style)."""
    tie_embeddings: bool = True
    """The output head is the token embedding (GPT-2, ANDREA's spec: one matrix, stored once); false gives the
    head a matrix of its own (OLMo 2, LLaMA), which adds vocab_size × d_model weights. The output-logit
    divergence that z-loss targets is described on such heads (Wortsman et al. 2023; docs/stability.md)."""
    embedding_scale: float = 1.0
    """Multiplier on the embeddings (token + position) before the first block; 1 = GPT-2. Gemma multiplies its
    token embedding by √d_model so that the stream starts at unit scale. A placement that adds a normed,
    unit-scale update per sublayer (peri, reordered) otherwise starts the stream at init_std and buries it
    under the first block's output (the mechanism check in docs/results.md, "Placements")."""
    dropout: float = 0.0
    """Dropout on embeddings, attention and residual branches."""
    layer_norm_eps: float = 1e-5
    """LayerNorm epsilon."""
    init_std: float = 0.02
    """Standard deviation of the GPT-2 initialisation; residual projections get std/sqrt(2·n_layer)."""
    attn_logit_softcap: Optional[float] = None
    """Soft cap of the attention logits, ``cap·tanh(logits/cap)`` before the softmax (Gemma 2: 50); null =
    no cap (scaled_dot_product_attention). A cap runs attention through flex_attention; no attention dropout."""
    final_logit_softcap: Optional[float] = None
    """Soft cap of the output logits, ``cap·tanh(logits/cap)`` before the loss and sampling (Gemma 2: 30);
    null = no cap."""
    cpu_attention_fp32: bool = False
    """On the CPU, compute the attention (q·kᵀ, softmax, ·v) in float32 even under bf16 autocast. PyTorch's CPU
    flash-attention kernel runs its bf16 backward about 3x slower than its float32 one (benchmarks/
    cpu_attention.py), which cost a bf16-mixed d512 step a fifth of its time; the projections around it stay
    in bf16. No effect on CUDA or outside autocast. Off by default, so runs made before it rerun to the bit;
    ``andrea sweep --speed`` turns it on with bf16-mixed (docs/performance.md)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field; raise one :class:`ConfigError` naming the first bad value and what is valid.

        Plugin names are only checked to be non-empty strings here; the model selects them
        (andrea_lab.model.components).
        """
        for name in ("vocab_size", "block_size", "d_model", "n_layer", "n_head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            divisors = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ConfigError(
                f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head}); "
                f"valid n_head for this d_model include {', '.join(map(str, divisors))}"
            )
        if self.mlp_ratio is not None and not (
            isinstance(self.mlp_ratio, (int, float)) and math.isfinite(self.mlp_ratio) and self.mlp_ratio > 0
        ):
            raise ConfigError(
                f"mlp_ratio must be a number > 0 (or null for the activation's default), got {self.mlp_ratio!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not 0 < self.layer_norm_eps < math.inf:
            raise ConfigError(f"layer_norm_eps must be a finite number > 0, got {self.layer_norm_eps!r}")
        if not 0 < self.init_std < math.inf:
            raise ConfigError(f"init_std must be a finite number > 0, got {self.init_std!r}")
        scale, (low, high) = self.embedding_scale, EMBEDDING_SCALE_RANGE
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not low <= scale <= high:
            raise ConfigError(
                f"embedding_scale must be a number in [{low:g}, {high:g}] (1 = GPT-2; Gemma: sqrt(d_model)), "
                f"got {scale!r}"
            )
        for flag in ("qk_norm", "bias", "tie_embeddings", "cpu_attention_fp32"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        _check_softcap("attn_logit_softcap", self.attn_logit_softcap, 50)
        _check_softcap("final_logit_softcap", self.final_logit_softcap, 30)
        if self.attn_logit_softcap is not None and self.dropout > 0:
            raise ConfigError(
                f"attn_logit_softcap {self.attn_logit_softcap!r} with dropout {self.dropout!r}: the "
                f"capped attention (flex_attention) has no attention dropout; set dropout 0 or "
                f"attn_logit_softcap null"
            )
        for kind in PLUGIN_FIELDS:
            name = getattr(self, kind)
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(
                    f"{kind} must be a plugin name (e.g. {getattr(AndreaConfig, kind)!r}), "
                    f"got {name!r}; `andrea plugins` lists the installed ones"
                )

    @property
    def head_size(self) -> int:
        return self.d_model // self.n_head

    def mlp_ratio_for(self, activation: type) -> float:
        """``mlp_ratio``, or the activation's default when it is None (4, or 8/3 if gated)."""
        return activation.default_mlp_ratio if self.mlp_ratio is None else self.mlp_ratio

    def mlp_hidden_for(self, activation: type) -> int:
        """The MLP's hidden size with this activation: the one place the width is worked out."""
        return mlp_hidden_size(self.d_model, self.mlp_ratio_for(activation))

    def to_dict(self) -> dict:
        return asdict(self)


#: Fields that decide the shapes and meaning of the weights; the others (kernel backend, dropout, ...)
#: may change between a checkpoint and the run that resumes from it.
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "block_size",
    "d_model",
    "n_layer",
    "n_head",
    "mlp_ratio",
    "norm_placement",
    "activation",
    "bias",
    "norm",
    "qk_norm",
    "tie_embeddings",
    "embedding_scale",
)


def _check_softcap(name: str, cap: Optional[float], example: float) -> None:
    """A soft cap is a finite number > 0, or None (no cap): ``cap·tanh(x/cap)`` is x near 0 for any such cap."""
    if cap is None:
        return
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not (math.isfinite(cap) and cap > 0):
        raise ConfigError(f"{name} must be a finite number > 0 (e.g. {example}) or null for no cap, got {cap!r}")


#: Named configurations. ``andrea-120m`` is the spec; the small ones are for CPUs and tests.
PRESETS: dict[str, dict] = {
    "andrea-120m": {},
    "andrea-small": dict(d_model=512, n_layer=8, n_head=8, block_size=512),
    "andrea-tiny": dict(d_model=128, n_layer=4, n_head=4, block_size=128),
    "andrea-micro": dict(vocab_size=257, d_model=64, n_layer=2, n_head=2, block_size=64),
}


def preset(name: str, **overrides) -> AndreaConfig:
    """Build a preset config, optionally changing some fields (``preset("andrea-tiny", activation="swiglu")``)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return AndreaConfig(**{**PRESETS[name], **overrides})
