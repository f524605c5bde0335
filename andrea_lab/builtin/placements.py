"""The built-in norm placements: ``pre`` (GPT-2, ANDREA), ``post`` (the 2017 Transformer) and
``no_residual`` (an ablation: pre-norm without the residual add)."""

import torch
from torch import nn

from andrea_lab.contracts import KernelBackend, LayerNorm, NormPlacement


class PreNorm(NormPlacement):
    """Pre-norm: ``x + sublayer(LN(x))``; the residual stream itself is never normalised.

    Because the stream is never normalised inside the trunk, its scale grows with depth, and the
    stack ends in a final LayerNorm before the output head (``final_norm = True``).
    """

    description = "x + f(LN(x)); final LayerNorm (GPT-2, ANDREA)"
    final_norm = True

    def __init__(self, d_model: int, sublayer: nn.Module, backend: KernelBackend, eps: float = 1e-5,
                 bias: bool = True):
        super().__init__(d_model, sublayer, backend, eps, bias)
        self.norm = LayerNorm(d_model, backend, eps=eps, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sublayer(self.norm(x))


class PostNorm(NormPlacement):
    """Post-norm, the 2017 wiring: ``LN(x + sublayer(x))``.

    No final LayerNorm (``final_norm = False``): the last block's output is already the output of
    a LayerNorm, so another one would only compose two affine maps of the same normalised vector,
    and the 2017 Transformer has none. ANDREA-120M with ``post`` therefore has 24 LayerNorms, not 25.
    """

    description = "LN(x + f(x)); no final LayerNorm (the 2017 Transformer)"
    final_norm = False

    def __init__(self, d_model: int, sublayer: nn.Module, backend: KernelBackend, eps: float = 1e-5,
                 bias: bool = True):
        super().__init__(d_model, sublayer, backend, eps, bias)
        self.norm = LayerNorm(d_model, backend, eps=eps, bias=bias)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, normed = self.backend.add_layer_norm(x, self.sublayer(x), self.norm.weight, self.norm.bias,
                                                self.norm.eps)
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
