"""Behaviour checks for a plugin, beyond the contract the registry checks at selection.

The registry checks what a plugin *is* (a class, the attributes, the constructor's signature, the
contract version). These checks run it: each plugin alone on small tensors (shapes, finiteness,
gradients, a gated activation's widths, a backend's ops against the eager reference), then inside a
micro ANDREA model, alone and with each built-in of the other kinds, forward and backward. They are
what ``andrea plugins --check`` reports and what :mod:`andrea_lab.plugin.testing`'s ``check_activation``,
``check_placement``, ``check_backend`` and ``check_norm`` assert in a plugin's own tests.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch import nn

from andrea_lab.errors import AndreaError
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.check_failed import MICRO, CheckFailed, require
from andrea_lab.model.config import preset
from andrea_lab.model.contracts import PLUGIN_KINDS, Availability, KernelBackend
from andrea_lab.model.guard import shape_text
from andrea_lab.model.registry import PluginInfo, check_availability, list_plugins, resolve, with_article
from andrea_lab.model.training_check import check_optimizer, check_schedule
from andrea_lab.model.transformer import Andrea, NormFactory, accepts, placement_kwargs

BUILTIN_DISTRIBUTION = "andrea-lab"


class Unavailable(Exception):
    """A kernel backend whose ``availability()`` says it cannot run here (its reason is the message)."""


_require = require


def _finite(tensor: torch.Tensor) -> bool:
    return bool(torch.isfinite(tensor).all())


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _shape_kept_with_gradients(
    module: nn.Module, x: torch.Tensor, generator: torch.Generator, what: str, shape_rule: str
) -> torch.Tensor:
    """What a norm and a placement must both do with a tensor ``x`` (a leaf that requires grad): return a
    finite tensor of its shape that is attached to it, through which a random projection backpropagates a
    finite gradient to ``x``. ``what`` names ``x`` in the messages, ``shape_rule`` why its shape must stay.
    Returns the output (``x.grad`` holds the gradient)."""
    y = module(x)
    _require(isinstance(y, torch.Tensor), f"forward returned {type(y).__name__}, not a tensor")
    _require(
        y.shape == x.shape,
        f"forward returned shape {shape_text(y.shape)} for {with_article(what)} "
        f"of shape {shape_text(x.shape)}; {shape_rule}",
    )
    _require(_finite(y), f"forward returned NaN or inf for a normal {what}")
    _require(y.requires_grad, f"no gradient reaches the {what}: the output is detached from it")
    (y * torch.randn(y.shape, generator=generator)).sum().backward()
    _require(
        x.grad is not None and _finite(x.grad), f"the gradient with respect to the {what} is missing or not finite"
    )
    return y


def check_activation(cls: type, backend: KernelBackend | None = None, width: int = 16) -> str:
    """Run an activation class alone: ``(2, 5, width)`` out of ``(2, 5, width)``, or of
    ``(2, 5, 2·width)`` when ``gated``; finite output and input gradient. Returns what was checked."""
    _require(isinstance(cls.gated, bool), f"gated must be True or False, got {cls.gated!r}")
    ratio = cls.default_mlp_ratio
    _require(
        isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio > 0,
        f"default_mlp_ratio must be a number > 0, got {ratio!r}",
    )
    activation = cls(backend if backend is not None else TorchBackend())
    generator = torch.Generator().manual_seed(0)
    width_in = 2 * width if cls.gated else width
    h = torch.randn(2, 5, width_in, generator=generator).requires_grad_()
    out = activation(h)
    _require(isinstance(out, torch.Tensor), f"forward returned {type(out).__name__}, not a tensor")
    if out.shape != (2, 5, width):
        hint = ""
        if not cls.gated and out.shape[-1] * 2 == width_in:
            hint = "; it halves its input like a gated activation: declare `gated = True` on the class"
        elif cls.gated and out.shape[-1] == width_in:
            hint = "; it declares `gated = True`, so it receives [gate | value] and must return half of it"
        raise CheckFailed(
            f"forward returned shape {shape_text(out.shape)} for an input of shape "
            f"{shape_text(h.shape)}; expected {shape_text((2, 5, width))} "
            f"({'gated' if cls.gated else 'ungated'}){hint}"
        )
    _require(_finite(out), "forward returned NaN or inf for a standard-normal input")
    _require(out.requires_grad, "no gradient reaches the input: the output is detached from it")
    (out * torch.randn(out.shape, generator=generator)).sum().backward()
    _require(h.grad is not None, "no gradient reaches the input (is the output detached?)")
    _require(_finite(h.grad), "the gradient with respect to the input is NaN or inf")
    _require(bool(h.grad.abs().sum() > 0), "the gradient with respect to the input is zero everywhere")
    return f"alone: {shape_text(out.shape)} from {shape_text(h.shape)}, finite, gradients finite"


def check_placement(cls: type, backend: KernelBackend | None = None, d_model: int = 16) -> str:
    """Run a norm placement class alone around a linear sublayer: the stream's shape back, finite,
    and the sublayer registered and in the graph. Returns what was checked."""
    _require(isinstance(cls.final_norm, bool), f"final_norm must be True or False, got {cls.final_norm!r}")
    generator = torch.Generator().manual_seed(0)
    sublayer = nn.Linear(d_model, d_model)
    backend = backend if backend is not None else TorchBackend()
    config = preset("andrea-micro", **MICRO)
    norm = NormFactory(resolve("norm", config.norm), backend, 1e-5, True, config.norm)
    placement = cls(d_model, sublayer, backend, **placement_kwargs(cls, config, norm))
    _require(isinstance(placement, nn.Module), "a placement must be an nn.Module (subclass NormPlacement)")
    _require(
        any(module is sublayer for module in placement.modules()),
        "the sublayer is not a submodule of the placement, so its parameters would not be trained or "
        "saved; assign it to an attribute (NormPlacement.__init__ does: self.sublayer = sublayer)",
    )
    x = torch.randn(2, 5, d_model, generator=generator).requires_grad_()
    y = _shape_kept_with_gradients(
        placement, x, generator, "residual stream", "a placement must return the stream's shape"
    )
    _require(
        sublayer.weight.grad is not None and bool(sublayer.weight.grad.abs().sum() > 0),
        "the sublayer receives no gradient: forward does not use it",
    )
    return f"alone around a Linear: {shape_text(y.shape)}, finite, sublayer trained"


def check_norm(cls: type, backend: KernelBackend | None = None, dim: int = 16) -> str:
    """Run a norm class alone at two widths (a d_model and a head size, as the QK norm uses it): the input's
    shape back, finite, gradients reaching the input and every parameter, and ``add_and_norm`` returning
    ``(x + delta, norm(x + delta))``. Returns what was checked."""
    generator = torch.Generator().manual_seed(0)
    for width in (dim, dim // 4):
        norm = cls(width, backend if backend is not None else TorchBackend(), eps=1e-5, bias=True)
        _require(isinstance(norm, nn.Module), "a norm must be an nn.Module (subclass andrea_lab.model.contracts.Norm)")
        x = (3 * torch.randn(2, 5, width, generator=generator) + 1).requires_grad_()
        _shape_kept_with_gradients(norm, x, generator, "input", "a norm must keep the shape")
        _require(bool(x.grad.abs().sum() > 0), "the gradient with respect to the input is zero everywhere")
        for name, parameter in norm.named_parameters():
            _require(
                parameter.grad is not None and _finite(parameter.grad),
                f"parameter {name} receives no finite gradient (unused in forward?)",
            )
        delta = torch.randn(x.shape, generator=generator)
        summed, normed = norm.add_and_norm(x.detach(), delta)
        _require(torch.equal(summed, x.detach() + delta), "add_and_norm's first output is not x + delta")
        _require(
            torch.allclose(normed, norm(x.detach() + delta), rtol=1e-4, atol=1e-5),
            "add_and_norm's second output differs from norm(x + delta)",
        )
    return f"alone at widths {dim} and {dim // 4}: shape kept, finite, gradients finite, add_and_norm consistent"


def check_backend(cls: type, rtol: float = 1e-4, atol: float = 1e-5, device: torch.device | None = None) -> str:
    """Compare every op of a kernel backend class with the eager reference (:class:`KernelBackend`),
    outputs and gradients, on the GPU when there is one. Raises :class:`Unavailable` when its
    ``availability()`` says no. Returns what was checked."""
    availability: Availability = check_availability(cls, f"kernel_backend {cls.__name__}")
    if not availability:
        raise Unavailable(availability.reason or "availability() said no, without a reason")
    device = device or _device()
    backend, reference = cls(), KernelBackend()
    generator = torch.Generator().manual_seed(0)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device).requires_grad_()

    x, delta, gate, up = leaf(4, 7, 32), leaf(4, 7, 32), leaf(4, 7, 24), leaf(4, 7, 24)
    weight, bias = leaf(32), leaf(32)
    cases = {
        "layer_norm": lambda b: b.layer_norm(x, weight, bias, 1e-5),
        "layer_norm (weight and bias None)": lambda b: b.layer_norm(x, None, None, 1e-5),
        "add_layer_norm": lambda b: torch.cat(b.add_layer_norm(x, delta, weight, bias, 1e-5), dim=-1),
        "rms_norm": lambda b: b.rms_norm(x, weight, 1e-5),
        "gelu_tanh": lambda b: b.gelu_tanh(x),
        "relu": lambda b: b.relu(x),
        "swiglu": lambda b: b.swiglu(gate, up),
    }
    if not hasattr(backend, "rms_norm"):  # optional: a backend written before it; the norms use the reference
        del cases["rms_norm"]
    inputs = (x, delta, gate, up, weight, bias)
    for op, run in cases.items():
        _compare_op(op, run, (backend, reference), inputs, device, rtol, atol)
    return f"ops match the eager reference on {device.type} ({', '.join(cases)})"


def _compare_op(op: str, run, impls: tuple, inputs: tuple, device: torch.device, rtol: float, atol: float) -> None:
    """One op of a backend against the reference's (``impls``: backend, reference): output and gradients."""
    outputs, grads = [], []
    for impl in impls:
        for tensor in inputs:
            tensor.grad = None
        out = run(impl)
        _require(isinstance(out, torch.Tensor), f"{op} returned {type(out).__name__}, not a tensor")
        outputs.append(out)
        (out * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
        grads.append([None if t.grad is None else t.grad.clone() for t in inputs])
    got, want = outputs
    _require(
        got.shape == want.shape, f"{op} returned shape {shape_text(got.shape)}, the reference {shape_text(want.shape)}"
    )
    _require(_finite(got), f"{op} returned NaN or inf where the reference is finite")
    error = (got.detach() - want.detach()).abs().max().item()
    _require(
        torch.allclose(got.detach(), want.detach(), rtol=rtol, atol=atol),
        f"{op} differs from the eager reference by up to {error:.3g} (rtol {rtol}, atol {atol})",
    )
    for tensor_grad, reference_grad in zip(*grads):
        if reference_grad is None:
            continue
        _require(
            tensor_grad is not None,
            f"{op}: no gradient where the reference has one (wrap a custom kernel in a torch.autograd.Function)",
        )
        _require(
            torch.allclose(tensor_grad, reference_grad, rtol=rtol, atol=atol),
            f"{op}: gradient differs from the eager reference by up to "
            f"{(tensor_grad - reference_grad).abs().max().item():.3g}",
        )


UNIT_CHECKS = {
    "activation": check_activation,
    "norm_placement": check_placement,
    "kernel_backend": check_backend,
    "norm": check_norm,
    "optimizer": check_optimizer,
    "schedule": check_schedule,
}


def check_in_model(**names) -> None:
    """Build the micro model with these plugin names and config fields (the others at their defaults), run
    forward and backward once, and require finite logits, loss and gradients for every parameter."""
    config = preset("andrea-micro", **MICRO, **names)
    model = Andrea(config).to(_device())
    generator = torch.Generator().manual_seed(0)
    idx = torch.randint(0, config.vocab_size, (2, config.block_size), generator=generator).to(_device())
    logits, loss = model(idx, idx)
    expected = (2, config.block_size, config.vocab_size)
    _require(logits.shape == expected, f"logits of shape {shape_text(logits.shape)}, expected {shape_text(expected)}")
    _require(bool(torch.isfinite(loss)), f"the loss is {loss.item()} at initialisation")
    loss.backward()
    for name, parameter in model.named_parameters():
        _require(parameter.grad is not None, f"parameter {name} receives no gradient (unused in forward?)")
        _require(_finite(parameter.grad), f"the gradient of {name} is NaN or inf")


@dataclass
class Verdict:
    """The outcome of checking one plugin: passed steps, the first failure, or why it cannot run here."""

    info: PluginInfo
    passed: list[str] = field(default_factory=list)
    failure: str | None = None
    unavailable: str | None = None

    @property
    def status(self) -> str:
        return "FAIL" if self.failure else "UNAVAILABLE" if self.unavailable else "PASS"


def _builtins(kind: str) -> list[str]:
    return [
        info.qualified_name
        for info in list_plugins(kind, availability=False)
        if info.distribution == BUILTIN_DISTRIBUTION and not info.error
    ]


def check_in_models(kind: str, name: str) -> str:
    """:func:`check_in_model` with the plugin alone (the other kinds at their defaults), then with each
    built-in of the other kinds, then with ``qk_norm`` on. Returns what was checked."""
    combinations = [{}] + [{other: builtin} for other in PLUGIN_KINDS if other != kind for builtin in _builtins(other)]
    combinations.append({"qk_norm": True})
    if kind == "norm_placement" and not accepts(resolve(kind, name), "norm"):
        # Written before the norm kind: it builds LayerNorms itself, and the model refuses other norms with it.
        combinations = [
            others for others in combinations if others.get("norm", "andrea-lab:layernorm") == "andrea-lab:layernorm"
        ]
    for others in combinations:
        try:
            check_in_model(**{kind: name}, **others)
        except (CheckFailed, AndreaError) as exc:
            with_text = ", ".join(f"{other} {value}" for other, value in others.items()) or "the defaults"
            raise CheckFailed(f"micro model with {with_text}: {exc}") from exc
    with_text = ", ".join(
        value.partition(":")[2] if isinstance(value, str) else f"{other} {value}"
        for others in combinations[1:]
        for other, value in others.items()
    )
    return f"micro model forward + backward, alone and with {with_text or 'no built-ins'}"


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Tensors this small gain nothing from intra-op threads, and on a busy machine the threads'
    hand-offs dominate (measured: all built-ins checked in 7.4 s with 2 threads under load, 0.27 s
    with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def check_plugin(info: PluginInfo) -> Verdict:
    """Every check for one installed plugin; the first failure stops it (later steps would only repeat it)."""
    with one_thread():
        return _check_plugin(info)


def _check_plugin(info: PluginInfo) -> Verdict:
    verdict = Verdict(info)
    if info.error:
        verdict.failure = info.error
        return verdict
    name = info.qualified_name
    try:
        cls = resolve(info.kind, name)
        verdict.passed.append(UNIT_CHECKS[info.kind](cls))
        if info.kind in PLUGIN_KINDS:  # a model's part; an optimizer's own check trains a micro model already
            verdict.passed.append(check_in_models(info.kind, name))
    except Unavailable as exc:
        verdict.unavailable = str(exc)
    except (CheckFailed, AndreaError) as exc:
        verdict.failure = str(exc)
    except Exception as exc:  # anything a plugin raises is a failure of that plugin, reported as such
        verdict.failure = f"{type(exc).__name__}: {exc}"
    return verdict
