"""The built-in norms: ``layernorm`` (GPT-2, ANDREA's default) and ``rmsnorm`` (Zhang & Sennrich 2019).

Each computes through the kernel backend's op (``layer_norm``, ``rms_norm``), so a backend that
accelerates the op accelerates every norm of the model; a backend without its own op inherits the
eager reference (``andrea plugins`` lists which ops each backend leaves to it).
"""

from __future__ import annotations

import torch
from torch import nn

from andrea_lab.model.contracts import KernelBackend, Norm
from andrea_lab.model.contracts import LayerNorm as BackendLayerNorm


class LayerNorm(BackendLayerNorm):
    """LayerNorm, ``γ·(x − mean)/√(var + eps) + β``: GPT-2's and ANDREA's norm.

    The same module the model has always built (``nn.LayerNorm`` parameters ``weight`` and ``bias``), so
    the default model's state dict and arithmetic are unchanged by the norm kind.
    """

    description = "LayerNorm, gamma*(x-mean)/sqrt(var+eps)+beta; backend op layer_norm (GPT-2, ANDREA)"


class RMSNorm(nn.RMSNorm, Norm):
    """RMSNorm, ``γ·x/√(mean(x²) + eps)`` (Zhang & Sennrich 2019; LLaMA, OLMo 2): no centring, no bias.

    A gain only, as in the paper and in LLaMA: the config's ``bias`` is ignored here, so with
    ``bias: true`` RMSNorm differs from LayerNorm by both the mean subtraction and the shift β. The
    parameter is ``weight`` (``nn.RMSNorm``'s name), initialised to ones.
    """

    description = "RMSNorm, gamma*x/sqrt(mean(x^2)+eps), no bias; backend op rms_norm (LLaMA, OLMo 2)"

    def __init__(self, dim: int, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
        super().__init__(dim, eps=eps)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A backend that does not subclass KernelBackend may predate rms_norm: then the eager reference.
        op = getattr(self.backend, "rms_norm", None) or KernelBackend().rms_norm
        return op(x, self.weight, self.eps)
