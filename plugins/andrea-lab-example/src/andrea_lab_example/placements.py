"""``sandwich``: a LayerNorm before *and* after the sublayer, both inside the residual branch."""

from typing import ClassVar

import torch
from torch import nn

from andrea_lab.plugin import KernelBackend, LayerNorm, NormPlacement


class SandwichNorm(NormPlacement):
    """Sandwich norm: ``x + LN_out(f(LN_in(x)))`` (Ding et al. 2021, "CogView").

    Like pre-norm the residual stream itself is never normalised, so the stack still ends in a
    final LayerNorm (``final_norm = True``); the second norm bounds what each sublayer adds to the
    stream, which is what keeps large or low-precision runs from blowing up.

    Both norms are :class:`andrea_lab.plugin.LayerNorm`, so the selected kernel backend
    computes them (and they are plain ``nn.LayerNorm`` parameters in checkpoints).

    How it differs from andrea-lab's built-in ``peri``: with LayerNorm it computes the same function
    (Peri-LN and Gemma's pre+post norms are this wiring; the parameter names are the same, so one's state
    dict loads into the other). But it is written against the first placement contract: its constructor
    takes no ``norm=`` factory and builds LayerNorms itself, so it is always LayerNorm, and andrea-lab
    refuses it with any other ``model.config.norm``. It is kept so, as the example of a placement that
    predates the norm kind and still loads; a new placement accepts ``norm`` and builds its norms with
    ``self.make_norm(d_model)`` (see ``andrea_lab.model.builtin.placements.PeriNorm``), and select ``peri`` for
    this wiring with RMSNorm or a third-party norm.
    """

    contract_version: ClassVar[int] = 1  # see andrea_lab_example.activations.SquaredReLU
    description: ClassVar[str] = (
        "x + LN_out(f(LN_in(x))), LayerNorm only (first contract); final LayerNorm (CogView; = peri)"
    )
    final_norm: ClassVar[bool] = True

    def __init__(self, d_model: int, sublayer: nn.Module, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
        super().__init__(d_model, sublayer, backend, eps, bias)
        self.norm_in = LayerNorm(d_model, backend, eps=eps, bias=bias)
        self.norm_out = LayerNorm(d_model, backend, eps=eps, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm_out(self.sublayer(self.norm_in(x)))
