"""The plugin contracts: what a norm placement, an activation or a kernel backend must provide.

Every variant the model can be built with comes from one of three entry-point groups
(see ``andrea_lab.registry``). This module is the whole interface between andrea-lab and
a plugin, in one place, so that the built-ins, the CUDA backend and third-party packages
all implement the same thing.

A plugin is a *class* that subclasses one of the base classes below (recommended: it then
inherits the eager reference implementation of everything it does not override) or that
provides the same attributes. Each base class states ``contract_version``; a plugin built
for another major version is refused at selection with a message naming both versions.

Version history:
    1 -- first release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

#: The version of the plugin interfaces defined in this module. A plugin declares the version it
#: was written for in its ``contract_version`` class attribute; a different value is refused.
CONTRACT_VERSION = 1


@dataclass(frozen=True)
class Availability:
    """Whether a kernel backend can run here, and if not, exactly why (shown to the user verbatim)."""

    available: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.available


class KernelBackend:
    """The hot ops of the model, one method each; this base class is the eager PyTorch reference.

    A backend overrides the ops it accelerates and inherits the rest, so a backend is a few
    functions, never a copy of the model. Every op takes and returns ordinary tensors and must be
    differentiable (a custom kernel wraps itself in a ``torch.autograd.Function``).
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    #: One line shown by ``andrea plugins``: this class's own ``description``, else the first line of
    #: its own docstring (neither is inherited, for any kind of plugin).
    description: ClassVar[str] = ""

    @classmethod
    def availability(cls) -> Availability:
        """Say whether this backend can run on this machine; the reason is shown when it cannot."""
        return Availability(True)

    def layer_norm(self, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)

    def add_layer_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual add and LayerNorm of the sum in one call: returns ``(x + delta, LN(x + delta))``.

        A fused kernel reads ``x`` and ``delta`` once and writes both outputs in one pass.
        """
        summed = x + delta
        return summed, self.layer_norm(summed, weight, bias, eps)

    def gelu_tanh(self, x: torch.Tensor) -> torch.Tensor:
        """GELU with the tanh approximation: ``0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))``."""
        return F.gelu(x, approximate="tanh")

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The gated op of SwiGLU: ``silu(gate) * up``."""
        return F.silu(gate) * up


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose arithmetic is done by the selected kernel backend.

    Subclassing ``nn.LayerNorm`` keeps parameter names, initialisation and ``isinstance``
    checks identical to PyTorch's, so only the kernel changes with the backend.
    """

    def __init__(self, d_model: int, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
        super().__init__(d_model, eps=eps, bias=bias)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backend.layer_norm(x, self.weight, self.bias, self.eps)


class Activation(nn.Module):
    """The MLP's nonlinearity, from the hidden pre-activation to the hidden activation.

    An elementwise activation maps ``(..., hidden)`` to ``(..., hidden)``. A *gated* one
    (``gated = True``) receives ``(..., 2·hidden)`` — the MLP's first projection is twice as wide
    — and returns ``(..., hidden)``; by convention the first half is the gate, the second the
    value. ``default_mlp_ratio`` is used when the config leaves ``mlp_ratio`` unset: 4 for an
    ungated activation, 8/3 for a gated one so that its three matrices hold as many weights as
    two matrices at 4×.
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    gated: ClassVar[bool] = False
    default_mlp_ratio: ClassVar[float] = 4.0
    description: ClassVar[str] = ""

    def __init__(self, backend: KernelBackend):
        super().__init__()
        self.backend = backend

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class NormPlacement(nn.Module):
    """How one sublayer (attention or MLP) is wired to its norm(s) and the residual add.

    The model builds one instance per sublayer: ``placement(d_model, sublayer, backend, eps)``,
    and calls it on the residual stream ``x`` of shape ``(B, T, d_model)``; it returns the new
    residual stream. Use :class:`LayerNorm` for the norms so that the kernel backend computes
    them. ``final_norm`` says whether the stack ends in a LayerNorm before the output head.
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    final_norm: ClassVar[bool] = True
    description: ClassVar[str] = ""

    def __init__(self, d_model: int, sublayer: nn.Module, backend: KernelBackend, eps: float = 1e-5,
                 bias: bool = True):
        super().__init__()
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


#: The plugin kinds, in the order they are listed; each is the suffix of an entry-point group
#: ``andrea_lab.<kind>`` and a field of ``AndreaConfig``.
PLUGIN_KINDS: tuple[str, ...] = ("norm_placement", "activation", "kernel_backend")


@dataclass(frozen=True)
class Contract:
    """What the plugins of one entry-point group must be, as the registry checks it at selection.

    A plugin that does not subclass ``base`` must still provide every attribute in ``required`` and a
    constructor that accepts ``probe_args``/``probe_kwargs`` (the call the model makes).
    """

    base: type
    required: tuple[str, ...]
    constructor: str  # the call the model makes, as the documentation and error messages show it
    probe_args: tuple = ()
    probe_kwargs: tuple[tuple[str, object], ...] = ()


GROUP_CONTRACTS: dict[str, Contract] = {
    "norm_placement": Contract(NormPlacement, ("contract_version", "final_norm", "forward"),
                               "(d_model, sublayer, backend, eps=..., bias=...)",
                               (8, None, None), (("eps", 1e-5), ("bias", True))),
    "activation": Contract(Activation, ("contract_version", "gated", "default_mlp_ratio", "forward"),
                           "(backend)", (None,)),
    "kernel_backend": Contract(KernelBackend, ("contract_version", "availability", "layer_norm", "add_layer_norm",
                                               "gelu_tanh", "relu", "swiglu"), "()"),
}
assert tuple(GROUP_CONTRACTS) == PLUGIN_KINDS
