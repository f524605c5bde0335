"""A plugin that breaks its contract is named in one message, when the model is built, never from ``forward``.

The model calls plugins in three places: their constructors and ``availability()`` (while it is built), and
their ``forward``/ops (every step). The first two are wrapped in :func:`raised_by`. The third is checked once:
:func:`verify_plugins` runs the freshly built model on a micro batch (no gradient, the random generators as
they were, the weights untouched) with forward hooks on each plugin that check what it returned, so that:

* a placement that returns another shape than the residual stream's,
* an activation that returns another width than the MLP's hidden size (a gated one that forgot ``gated = True``),
* a plugin whose ``forward`` or op raises,

are each a :class:`~andrea_lab.model.registry.PluginRuntimeError` naming the plugin, its distribution and what
it returned (the exception kept as ``__cause__``; ``ANDREA_LAB_DEBUG=1`` shows the traceback). ``Block.forward``
and ``Andrea.forward`` then hold nothing but the architecture, and ``torch.compile`` sees no try/except.
"""

from __future__ import annotations

import contextlib
import traceback
from types import TracebackType
from typing import Iterator

import torch
from torch import nn

from andrea_lab.errors import AndreaError
from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.model.registry import PluginRuntimeError, describe_selection

#: The micro batch the plugins are checked on: (batch, tokens), the tokens at most the model's context.
CHECK_BATCH = (2, 8)


@contextlib.contextmanager
def raised_by(kind: str, name: str, where: str) -> Iterator[None]:
    """Blame any exception in the block on the ``kind`` plugin ``name`` (``where``: "its constructor")."""
    try:
        yield
    except AndreaError:
        raise
    except Exception as exc:  # a plugin may raise anything; say whose it was
        raise failure(kind, name, where, exc) from exc


def failure(kind: str, name: str, where: str, exc: BaseException) -> PluginRuntimeError:
    return PluginRuntimeError(f"{describe_selection(kind, name)} raised in {where}: {type(exc).__name__}: {exc}")


def culprit(tb: TracebackType | None, plugins: dict[str, type], own: tuple[type, ...]) -> str | None:
    """The kind of the plugin whose method raised, from the innermost frame whose ``self`` is a plugin
    instance (``plugins``: kind → class) or one of the model's own modules (``own``: then None)."""
    for frame, _ in reversed(list(traceback.walk_tb(tb))):
        obj = frame.f_locals.get("self")
        if obj is None:
            continue
        for kind in PLUGIN_KINDS:
            if kind in plugins and isinstance(obj, plugins[kind]):
                return kind
        if isinstance(obj, own):
            return None
    return None


def shape_text(shape) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def verify_plugins(model: nn.Module, plugins: dict[str, type], own: tuple[type, ...]) -> None:
    """Run ``model`` (an Andrea: its ``config``, ``sublayers()``, ``token_embed``) once on a micro batch and check
    what each plugin returns (module docstring); ``plugins`` maps each kind to its class, ``own`` lists the
    model's own module classes (an exception raised in them is the model's, not a plugin's). Skipped on the meta
    device, where nothing runs: such a model is only measured (``andrea params``), never trained."""
    weight = model.token_embed.weight
    if weight.device.type == "meta":
        return
    idx = torch.zeros(
        CHECK_BATCH[0], min(CHECK_BATCH[1], model.config.block_size), dtype=torch.long, device=weight.device
    )
    handles = _contract_hooks(model)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            model(idx)
    except AndreaError:
        raise
    except Exception as exc:
        kind = culprit(exc.__traceback__, plugins, own)
        if kind is None:
            raise
        raise failure(kind, getattr(model.config, kind), "forward", exc) from exc
    finally:
        for handle in handles:
            handle.remove()


def _contract_hooks(model: nn.Module) -> list:
    """Forward hooks that check each placement's and each activation's output against its contract."""
    handles = []
    for sublayer in model.sublayers():
        handles.append(sublayer.wiring.register_forward_hook(_stream_check(model.config.norm_placement)))
        if sublayer.kind == "mlp":
            mlp = sublayer.module
            handles.append(mlp.activation.register_forward_hook(_width_check(model.config.activation, mlp.hidden)))
    return handles


def _stream_check(name: str):
    def check(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        x = inputs[0]
        if output.shape != x.shape:
            raise PluginRuntimeError(
                f"{describe_selection('norm_placement', name)} returned shape {shape_text(output.shape)} "
                f"for a residual stream of shape {shape_text(x.shape)}; a placement must return the stream's "
                f"shape (batch, tokens, d_model)"
            )

    return check


def _width_check(name: str, hidden: int):
    def check(activation: nn.Module, inputs: tuple, a: torch.Tensor) -> None:
        h = inputs[0]
        if a.shape != (*h.shape[:-1], hidden):
            raise _width_error(name, type(activation).gated, hidden, h, a)

    return check


def _width_error(name: str, gated: bool, hidden: int, h: torch.Tensor, a: torch.Tensor) -> PluginRuntimeError:
    hint = ""
    if not gated and a.shape[-1] * 2 == h.shape[-1]:
        hint = "; it halves its input like a gated activation: declare `gated = True` on the class"
    elif gated and a.shape[-1] == h.shape[-1]:
        hint = "; it declares `gated = True`, so it receives [gate | value] and must return half of it"
    return PluginRuntimeError(
        f"{describe_selection('activation', name)} returned shape {shape_text(a.shape)} "
        f"for an input of shape {shape_text(h.shape)}; expected width {hidden} (the MLP hidden size, "
        f"{'gated' if gated else 'ungated'}: input width {h.shape[-1]}){hint}"
    )
