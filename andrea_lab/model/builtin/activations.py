"""The built-in MLP activations: ``gelu`` (tanh approximation, ANDREA's), ``relu`` and ``swiglu``."""

import torch

from andrea_lab.model.contracts import Activation


class GELU(Activation):
    """GELU, tanh approximation, as in GPT-2 and ANDREA's original CUDA engine."""

    description = "GELU, tanh approximation (GPT-2, ANDREA's default)"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.backend.gelu_tanh(h)


class ReLU(Activation):
    """ReLU, as in the 2017 Transformer."""

    description = "ReLU (the 2017 Transformer)"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.backend.relu(h)


class SwiGLU(Activation):
    """Gated SiLU (Shazeer 2020): ``silu(gate) * up``; three matrices at 8/3 match two at 4×.

    The MLP's first projection emits ``[gate | up]`` side by side (one matmul instead of two);
    the hidden size is ``mlp_ratio · d_model`` rounded as :func:`andrea_lab.model.config.mlp_hidden_size`
    says.
    """

    description = "gated SiLU, silu(gate)*up, default ratio 8/3 (parameter parity with GELU 4x)"
    gated = True
    default_mlp_ratio = 8 / 3

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = h.chunk(2, dim=-1)
        return self.backend.swiglu(gate, up)
