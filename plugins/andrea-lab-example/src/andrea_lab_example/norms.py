"""``dyt``: Dynamic Tanh, a norm without statistics (Zhu et al. 2025, "Transformers without Normalization")."""

from typing import ClassVar

import torch
from torch import nn

from andrea_lab.plugin import KernelBackend, Norm


class DynamicTanh(Norm):
    """Dynamic Tanh: ``γ·tanh(α·x) + β``, with α one learnable scalar (initialised to 0.5, the paper's
    default for non-LLM widths), γ and β per feature (ones and zeros, as a LayerNorm's).

    It replaces a norm's per-token statistics with an elementwise squashing: tanh's saturation bounds the
    output as a norm would, at the cost of being scale-sensitive (hence the learned α). ``eps`` is
    ignored (nothing is divided), and ``bias: false`` drops β. There is no backend op for it, so it is
    eager PyTorch whatever the backend; it still accepts ``backend`` because every norm is built so.
    """

    contract_version: ClassVar[int] = 1  # see andrea_lab_example.activations.SquaredReLU
    description: ClassVar[str] = "Dynamic Tanh, gamma*tanh(alpha*x)+beta, alpha learnable (init 0.5); eager"

    def __init__(self, dim: int, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(0.5))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.alpha * x) * self.weight
        return y + self.bias if self.bias is not None else y
