"""The plugin contracts: what a norm placement, an activation, a kernel backend or a norm must provide.

Every variant the model can be built with comes from one of four entry-point groups
(see ``andrea_lab.model.registry``). This module is the whole interface between andrea-lab and
a plugin, in one place, so that the built-ins, the CUDA backend and third-party packages
all implement the same thing.

A plugin is a *class* that subclasses one of the base classes below (recommended: it then
inherits the eager reference implementation of everything it does not override) or that
provides the same attributes. Each base class states ``contract_version``; a plugin built
for another major version is refused at selection with a message naming both versions.

Version history:
    1 -- first release. Added since, each backwards compatible (a plugin written before still loads and
         runs unchanged): the ``norm`` kind; the backend op ``rms_norm``; the placement constructor's
         optional ``norm=`` and ``n_layer=`` keywords and its ``initialise(config)`` hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from andrea_lab.model.config import AndreaConfig

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

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
    ) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)

    def add_layer_norm(
        self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual add and LayerNorm of the sum in one call: returns ``(x + delta, LN(x + delta))``.

        A fused kernel reads ``x`` and ``delta`` once and writes both outputs in one pass.
        """
        summed = x + delta
        return summed, self.layer_norm(summed, weight, bias, eps)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        """RMSNorm over the last dimension: ``x / sqrt(mean(x²) + eps) · weight`` (Zhang & Sennrich 2019)."""
        return F.rms_norm(x, x.shape[-1:], weight, eps)

    def gelu_tanh(self, x: torch.Tensor) -> torch.Tensor:
        """GELU with the tanh approximation: ``0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))``."""
        return F.gelu(x, approximate="tanh")

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The gated op of SwiGLU: ``silu(gate) * up``."""
        return F.silu(gate) * up


#: The ops of :class:`KernelBackend`, in the order ``andrea plugins`` lists them.
BACKEND_OPS: tuple[str, ...] = ("layer_norm", "add_layer_norm", "rms_norm", "gelu_tanh", "relu", "swiglu")


def eager_fallbacks(backend: type) -> list[str]:
    """The ops a backend class leaves to the eager reference: inherited from :class:`KernelBackend`
    unchanged, or (a backend that does not subclass it) missing, so that the plugins calling them fall
    back to the reference. ``andrea plugins`` shows them, so a slow path is never a surprise."""
    return [op for op in BACKEND_OPS if getattr(backend, op, None) in (None, getattr(KernelBackend, op))]


class Norm(nn.Module):
    """A normalisation over the last dimension, ``(..., dim)`` to ``(..., dim)``: every norm of the model.

    The model builds each of its norms through the selected norm plugin — the placements' norms (through
    the ``norm`` factory a placement receives), the final norm, and with ``qk_norm`` one per head on the
    queries and one on the keys — as ``norm(dim, backend, eps=..., bias=...)``: ``dim`` is ``d_model``,
    or the head size for the QK norm; ``eps`` and ``bias`` are the config's ``layer_norm_eps`` and
    ``bias`` (a norm without that parameter ignores them and says so in its docstring).

    A norm computes through the kernel backend where the backend has an op for it (``layer_norm``,
    ``rms_norm``), so a faster backend is used; otherwise it is eager PyTorch. A subclass writes its own
    ``__init__`` (calling ``super().__init__()``) and ``forward``; :meth:`add_and_norm` has a default.
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    description: ClassVar[str] = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def add_and_norm(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x + delta, norm(x + delta))``: what a post-norm placement needs; a norm whose backend fuses
        the residual add into the norm (``add_layer_norm``) overrides this to use it."""
        summed = x + delta
        return summed, self(summed)


#: What a placement receives as ``norm``: ``norm(dim)`` builds one norm of the selected kind, with the
#: config's eps and bias and the model's backend.
NormFactory = Callable[[int], nn.Module]


class LayerNorm(nn.LayerNorm, Norm):
    """``nn.LayerNorm`` whose arithmetic is done by the selected kernel backend.

    Subclassing ``nn.LayerNorm`` keeps parameter names, initialisation and ``isinstance``
    checks identical to PyTorch's, so only the kernel changes with the backend. It is the norm of
    the built-in ``layernorm`` plugin, and the one a placement written before the norm kind builds itself.
    """

    def __init__(self, d_model: int, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
        super().__init__(d_model, eps=eps, bias=bias)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backend.layer_norm(x, self.weight, self.bias, self.eps)

    def add_and_norm(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.backend.add_layer_norm(x, delta, self.weight, self.bias, self.eps)


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

    The model builds one instance per sublayer:
    ``placement(d_model, sublayer, backend, eps=..., bias=..., norm=..., n_layer=...)``, and calls it on
    the residual stream ``x`` of shape ``(B, T, d_model)``; it returns the new residual stream.
    ``final_norm`` says whether the stack ends in a norm before the output head.

    * ``norm`` is a factory: ``norm(d_model)`` builds one norm of the kind the config selects
      (``model.config.norm``), so a placement never names a norm type itself. Build the norms with
      :meth:`make_norm`, which is that factory (or, when a caller passes none, :class:`LayerNorm`).
    * ``n_layer`` is the depth of the model, for placements whose wiring depends on it (DeepNorm's α).

    Both keywords are passed only to a constructor that accepts them, so a placement written before them
    (building :class:`LayerNorm` itself) still loads; with a norm other than ``layernorm`` the model
    refuses it, since it could not honour the choice.

    :meth:`initialise` is the placement's own initialisation: the model calls it once per placement,
    after GPT-2's initialisation of every weight (DeepNorm scales its sublayer's value-path weights there).
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    final_norm: ClassVar[bool] = True
    description: ClassVar[str] = ""

    def __init__(
        self,
        d_model: int,
        sublayer: nn.Module,
        backend: KernelBackend,
        eps: float = 1e-5,
        bias: bool = True,
        norm: NormFactory | None = None,
    ):
        super().__init__()
        self.sublayer = sublayer
        self.make_norm: NormFactory = (
            norm if norm is not None else partial(LayerNorm, backend=backend, eps=eps, bias=bias)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def initialise(self, config: AndreaConfig) -> None:
        """Re-initialise what this placement needs differently from GPT-2's init (called after it; default:
        nothing). ``config`` is the model's :class:`~andrea_lab.model.config.AndreaConfig`."""


#: The plugin kinds, in the order they are listed; each is the suffix of an entry-point group
#: ``andrea_lab.<kind>`` and a field of ``AndreaConfig``.
PLUGIN_KINDS: tuple[str, ...] = ("norm_placement", "activation", "kernel_backend", "norm")


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
    "norm_placement": Contract(
        NormPlacement,
        ("contract_version", "final_norm", "forward"),
        "(d_model, sublayer, backend, eps=..., bias=...)",
        (8, None, None),
        (("eps", 1e-5), ("bias", True)),
    ),
    "activation": Contract(
        Activation, ("contract_version", "gated", "default_mlp_ratio", "forward"), "(backend)", (None,)
    ),
    # rms_norm is not required: a backend written before it lacks it, and the norms fall back to the reference.
    "kernel_backend": Contract(
        KernelBackend,
        ("contract_version", "availability", "layer_norm", "add_layer_norm", "gelu_tanh", "relu", "swiglu"),
        "()",
    ),
    "norm": Contract(
        Norm,
        ("contract_version", "forward", "add_and_norm"),
        "(dim, backend, eps=..., bias=...)",
        (8, None),
        (("eps", 1e-5), ("bias", True)),
    ),
}
assert tuple(GROUP_CONTRACTS) == PLUGIN_KINDS
