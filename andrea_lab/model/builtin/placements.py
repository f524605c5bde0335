"""The built-in norm placements: ``pre`` (GPT-2, ANDREA), ``post`` (the 2017 Transformer), ``no_residual``
(an ablation: pre-norm without the residual add), and the modern ones: ``peri`` (Peri-LN, Gemma 2/3),
``reordered`` (OLMo 2) and ``deepnorm`` (DeepNet).

Every norm here is built with ``self.make_norm`` (:class:`~andrea_lab.model.contracts.NormPlacement`), so it is
of the kind ``model.config.norm`` selects; the names ``layernorm``/``LN`` below stand for that norm.
"""

from __future__ import annotations

import torch
from torch import nn

from andrea_lab.model.contracts import KernelBackend, NormFactory, NormPlacement


class _OneNorm(NormPlacement):
    """A placement with one norm, ``self.norm``, of the model's norm kind (pre, post, reordered, deepnorm)."""

    def __init__(
        self,
        d_model: int,
        sublayer: nn.Module,
        backend: KernelBackend,
        eps: float = 1e-5,
        bias: bool = True,
        norm: NormFactory | None = None,
    ):
        super().__init__(d_model, sublayer, backend, eps, bias, norm)
        self.norm = self.make_norm(d_model)


class PreNorm(_OneNorm):
    """Pre-norm: ``x + sublayer(LN(x))``; the residual stream itself is never normalised.

    Because the stream is never normalised inside the trunk, its scale grows with depth, and the
    stack ends in a final LayerNorm before the output head (``final_norm = True``).
    """

    description = "x + f(LN(x)); final LayerNorm (GPT-2, ANDREA)"
    final_norm = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sublayer(self.norm(x))


class PostNorm(_OneNorm):
    """Post-norm, the 2017 wiring: ``LN(x + sublayer(x))``.

    No final LayerNorm (``final_norm = False``): the last block's output is already the output of
    a LayerNorm, so another one would only compose two affine maps of the same normalised vector,
    and the 2017 Transformer has none. ANDREA-120M with ``post`` therefore has 24 LayerNorms, not 25.
    The add and the norm go through the norm's ``add_and_norm`` (the backend's fused kernel for LayerNorm).
    """

    description = "LN(x + f(x)); no final LayerNorm (the 2017 Transformer)"
    final_norm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, normed = self.norm.add_and_norm(x, self.sublayer(x))
        return normed


class NoResidual(PreNorm):
    """Pre-norm with the residual add removed: ``f(LN(x))``; the final LayerNorm is kept.

    An ablation, not a model to train for real: it is the ``pre`` wiring minus the skip connection,
    so comparing it with ``pre`` isolates what the residual path does for gradient flow (without the
    identity path, the gradient reaching block 0 is a product of every sublayer's Jacobian). Each
    sublayer's output *replaces* the stream, so the stream is whatever the last projection wrote.
    """

    description = "f(LN(x)); pre-norm without the residual add (ablation); final LayerNorm"
    final_norm = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sublayer(self.norm(x))


class PeriNorm(NormPlacement):
    """Peri-norm: ``x + LN_out(sublayer(LN_in(x)))`` (Peri-LN, Kim et al. 2025; Gemma 2/3's pre+post norms;
    CogView's sandwich-LN is the same wiring).

    The input norm is pre-norm's; the output norm bounds what each sublayer adds to the stream, so one
    sublayer's large activations cannot dominate it. The stream itself is never normalised, so the stack
    ends in a final norm.
    """

    description = "x + LN_out(f(LN_in(x))); final LayerNorm (Peri-LN, Gemma 2/3)"
    final_norm = True

    def __init__(
        self,
        d_model: int,
        sublayer: nn.Module,
        backend: KernelBackend,
        eps: float = 1e-5,
        bias: bool = True,
        norm: NormFactory | None = None,
    ):
        super().__init__(d_model, sublayer, backend, eps, bias, norm)
        self.norm_in = self.make_norm(d_model)
        self.norm_out = self.make_norm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm_out(self.sublayer(self.norm_in(x)))


class ReorderedNorm(_OneNorm):
    """OLMo 2's reordered norm: ``x + LN(sublayer(x))``, the norm on the sublayer's output only.

    The sublayer reads the raw stream (as in post-norm) but the stream is never normalised (as in
    pre-norm): only what each sublayer adds is. The stack ends in a final norm (OLMo 2 has one).
    """

    description = "x + LN(f(x)); final LayerNorm (OLMo 2)"
    final_norm = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.sublayer(x))


def value_path_weights(sublayer: nn.Module) -> list[torch.Tensor]:
    """The weights DeepNet's β scales: the sublayer's own list (the attention's value and output
    projections, the MLP's matrices), or every matrix of a sublayer that does not say (no q/k in it)."""
    if hasattr(sublayer, "value_path_weights"):
        return sublayer.value_path_weights()
    return [p for p in sublayer.parameters() if p.dim() >= 2]


class DeepNorm(_OneNorm):
    """DeepNorm (Wang et al. 2022, "DeepNet"): post-norm with the residual up-weighted, ``LN(α·x + sublayer(x))``.

    For a decoder-only model of N layers the paper gives α = (2N)^(1/4) and β = (8N)^(-1/4): α makes
    the residual dominate each sublayer's update, and :meth:`initialise` draws the weights on the
    sublayer's value path (the attention's value and output projections, the MLP's matrices; not q, k)
    from N(0, (β·init_std)²). That replaces GPT-2's 1/√(2N) scaling of the output projections with the
    paper's β; the base std is the config's ``init_std`` (the paper's base init is Xavier), so only the
    placement differs from the other placements' models. Post-norm, so no final norm.
    """

    description = "LN(alpha*x + f(x)), alpha=(2N)^(1/4), value-path init x beta=(8N)^(-1/4); no final LayerNorm"
    final_norm = False

    def __init__(
        self,
        d_model: int,
        sublayer: nn.Module,
        backend: KernelBackend,
        eps: float = 1e-5,
        bias: bool = True,
        norm: NormFactory | None = None,
        n_layer: int | None = None,
    ):
        super().__init__(d_model, sublayer, backend, eps, bias, norm)
        if not isinstance(n_layer, int) or n_layer < 1:
            raise ValueError(f"deepnorm needs the model's depth n_layer (a positive integer), got {n_layer!r}")
        self.alpha = (2 * n_layer) ** 0.25
        self.beta = (8 * n_layer) ** -0.25

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, normed = self.norm.add_and_norm(self.alpha * x, self.sublayer(x))
        return normed

    @torch.no_grad()
    def initialise(self, config) -> None:
        for weight in value_path_weights(self.sublayer):
            weight.normal_(0.0, config.init_std * self.beta)
