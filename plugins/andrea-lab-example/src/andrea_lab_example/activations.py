"""``squared_relu``: ReLU², the MLP activation of the modded-nanoGPT speedrun."""

from typing import ClassVar

import torch

from andrea_lab.plugin import Activation


class SquaredReLU(Activation):
    """ReLU squared: ``relu(x)²`` (So et al. 2021, "Primer"; used by the modded-nanoGPT speedrun).

    Elementwise (not gated), so the MLP keeps the default ratio of 4. The ReLU itself is computed
    by the kernel backend, so a backend that accelerates ``relu`` accelerates this too.
    """

    # The contract version these classes were written against. Stated here rather than inherited
    # from the base class so that an andrea-lab with a different contract refuses the plugin
    # instead of silently running it under rules it was never written for.
    contract_version: ClassVar[int] = 1
    description: ClassVar[str] = "ReLU squared, relu(x)**2 (Primer; the modded-nanoGPT speedrun)"
    gated: ClassVar[bool] = False
    default_mlp_ratio: ClassVar[float] = 4.0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.backend.relu(h).square()
