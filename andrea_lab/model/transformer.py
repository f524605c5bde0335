"""ANDREA: a GPT-2-shaped, decoder-only transformer, read top to bottom like the spec.

    x = embedding_scale · (token_embed(ids) + position_embed(positions))   # scale 1 unless the config says
    for block in blocks:  x = block(x)      # each block: attention sublayer, then MLP sublayer
    x = final_norm(x)                        # if the norm placement keeps one
    logits = x · token_embed.T               # tied input/output embedding (soft-capped if the config says)

Which norm placement, activation, kernel backend and norm are used is decided by the config's names,
resolved through the plugin registry once, in ``Andrea.__init__`` (andrea_lab.model.components); the classes
are handed down to the blocks, and this file never branches on a name. Each plugin's contract (what its
forward returns) is checked once, when the model is built (andrea_lab.model.guard): the forward passes below
are the architecture and nothing else. Every norm (the placements', the final one, the QK norm)
is built by one :class:`NormFactory`, so the norm kind reaches all of them.

Looking inside (the stability probe, ``andrea trace``, ``andrea params``) goes through one small API at the
end of this file: :meth:`Andrea.sublayers` lists the trunk's sublayers (block index, kind, the module and
the norm-placement wiring around it) and :meth:`Andrea.tap` calls back with the residual stream before and
after each sublayer, the attention logits and the MLP's hidden activations during a forward pass.
"""

from __future__ import annotations

import inspect
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from andrea_lab.model.components import Components, resolve_components
from andrea_lab.model.config import AndreaConfig, ConfigError
from andrea_lab.model.contracts import Activation, KernelBackend, Norm
from andrea_lab.model.guard import raised_by, verify_plugins
from andrea_lab.model.registry import BackendUnavailableError, check_availability, describe_selection, same_plugin
from andrea_lab.model.softcap import softcap, softcapped_attention


@dataclass(frozen=True)
class NormFactory:
    """``factory(dim)`` builds one norm of the selected kind, with the config's eps and bias and the model's
    backend: what a placement receives as ``norm``, and how the final and QK norms are built."""

    norm_cls: type[Norm]
    backend: KernelBackend
    eps: float
    bias: bool
    name: str  # the config's norm name, for the error that blames the plugin

    def __call__(self, dim: int) -> nn.Module:
        with raised_by("norm", self.name, "its constructor"):
            return self.norm_cls(dim, self.backend, eps=self.eps, bias=self.bias)


class AttentionInputs(nn.Module):
    """Passes q and k through unchanged: the point where they are what the softmax's logits are made of
    (after the QK norm), so that :meth:`Andrea.tap` can watch them with a forward hook."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.scaled_dot_product_attention``.

    With ``qk_norm`` the queries and keys are normalised per head, over the head size, by the norm plugin
    (one norm for q and one for k, shared by the heads) before the dot product: the logits are then
    bounded by the norms' gains, not by the growth of the q and k projections. With a soft cap of the logits
    (``attn_logit_softcap``) the attention goes through flex_attention, which can apply it
    (andrea_lab/model/softcap.py).
    """

    def __init__(self, config: AndreaConfig, norm: NormFactory):
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.softcap = config.attn_logit_softcap
        self.cpu_attention_fp32 = config.cpu_attention_fp32
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        if config.qk_norm:  # only then: the default model's state dict keeps its keys
            self.q_norm, self.k_norm = norm(config.head_size), norm(config.head_size)
        else:
            self.q_norm = self.k_norm = nn.Identity()
        self.logit_inputs = AttentionInputs()
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.proj.is_residual_projection = True  # scaled at init, see Andrea._init_weights
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.project(x)  # (B, nh, T, hs)
        if self.cpu_attention_fp32 and q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            y = self.attend_in_fp32(q, k, v)  # the CPU's bf16 attention kernel is the slow one
        else:
            y = self.attend(q, k, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.proj(y))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q·kᵀ/√hs, causal)·v per head (B, nh, T, hs), through the fused kernel or, with a cap, flex."""
        if self.softcap is None:
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
            )
        return softcapped_attention(q, k, v, self.softcap)  # the config refuses attention dropout with a cap

    def attend_in_fp32(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The attention in float32 under CPU autocast (AndreaConfig.cpu_attention_fp32). Autocast casts
        ``scaled_dot_product_attention``'s inputs down to bf16, but not those of the CPU flash kernel's own op, which
        that function calls for these inputs: called directly with float32 inputs it runs in float32, bit for bit
        as the function would with autocast off (tested), and a compiled model's graph then holds no autocast
        context, which would make AOTAutograd's cache bypass it (every warm compile re-traced the joint graph).
        Dropout and the soft cap, which that kernel does not do, keep autocast off around :meth:`attend`."""
        if self.softcap is None and not (self.training and self.dropout > 0):
            return cpu_flash_attention(q.float(), k.float(), v.float())
        with torch.autocast("cpu", enabled=False):
            return self.attend(q.float(), k.float(), v.float())

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, nh, T, hs) of the stream x (B, T, C): the qkv projection, split into heads, q and k
        normalised when ``qk_norm`` is on."""
        q, k, v = self.heads(self.qkv(x))  # (B, nh, T, hs)
        q, k = self.logit_inputs(self.q_norm(q), self.k_norm(k))
        return q, k, v

    def heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split the qkv projection (B, T, 3C) into q, k, v, each (B, nh, T, hs)."""
        B, T, three_c = qkv.shape
        return tuple(
            t.view(B, T, self.n_head, three_c // (3 * self.n_head)).transpose(1, 2)
            for t in qkv.split(three_c // 3, dim=2)
        )

    def value_path_weights(self) -> list[torch.Tensor]:
        """The value projection (the last third of qkv's rows) and the output projection: the weights
        a value passes through, as opposed to q and k, which only shape the attention pattern."""
        C = self.proj.weight.shape[0]
        return [self.qkv.weight[2 * C :], self.proj.weight]


def cpu_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention through the CPU flash kernel's own op, in the inputs' dtype whatever autocast says."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]


class MLP(nn.Module):
    """Expand to the hidden size, apply the activation plugin, contract back to d_model.

    A gated activation gets a first projection twice as wide (gate and value side by side).
    """

    def __init__(self, config: AndreaConfig, activation_cls: type[Activation], backend: KernelBackend):
        super().__init__()
        self.hidden = config.mlp_hidden_for(activation_cls)
        self.fc = nn.Linear(config.d_model, self.hidden * (2 if activation_cls.gated else 1), bias=config.bias)
        with raised_by("activation", config.activation, "its constructor"):
            self.activation = activation_cls(backend)
        self.proj = nn.Linear(self.hidden, config.d_model, bias=config.bias)
        self.proj.is_residual_projection = True
        self.dropout = nn.Dropout(config.dropout)

    def value_path_weights(self) -> list[torch.Tensor]:
        """Both matrices: every weight of the MLP is on the path of the values it transforms."""
        return [self.fc.weight, self.proj.weight]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)  # (B, T, hidden), or (B, T, 2·hidden) for a gated activation
        a = self.activation(h)  # (B, T, hidden)
        return self.dropout(self.proj(a))


class Block(nn.Module):
    """Two sublayers, attention then MLP, each wired to its norm and the residual by the placement plugin."""

    def __init__(
        self,
        config: AndreaConfig,
        components: Components,
        backend: KernelBackend,
        norm: NormFactory,
        placement_kwargs: dict,
    ):
        super().__init__()
        placement = components.norm_placement
        attention, mlp = CausalSelfAttention(config, norm), MLP(config, components.activation, backend)
        with raised_by("norm_placement", config.norm_placement, "its constructor"):
            self.attn = placement(config.d_model, attention, backend, **placement_kwargs)
            self.mlp = placement(config.d_model, mlp, backend, **placement_kwargs)
        # The sublayers themselves, whatever the placement does with them (a plain tuple: not registered
        # twice, so the state dict keeps its names); Andrea.sublayers reads them.
        self.inner = (attention, mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(x)  # (B, T, C): attention, wired to its norm and the residual by the placement
        return self.mlp(x)  # (B, T, C): then the MLP, the same way


def placement_kwargs(placement: type, config: AndreaConfig, norm: NormFactory) -> dict:
    """The keywords the model passes a placement: eps and bias always; ``norm`` and ``n_layer`` to a
    constructor that accepts them (one written before them builds LayerNorms itself and still loads,
    but cannot honour another norm kind, which is refused here rather than silently ignored)."""
    offered = {"norm": norm, "n_layer": config.n_layer}
    kwargs = {"eps": config.layer_norm_eps, "bias": config.bias}
    kwargs.update({key: value for key, value in offered.items() if accepts(placement, key)})
    if "norm" not in kwargs and not _same_norm(config.norm, AndreaConfig.norm):
        raise ConfigError(
            f"{describe_selection('norm_placement', config.norm_placement)} takes no norm= "
            f"factory (it builds its LayerNorms itself), so norm {config.norm!r} cannot reach its "
            f"norms; use norm {AndreaConfig.norm!r} with it, or a placement that accepts norm="
        )
    return kwargs


def accepts(placement: type, keyword: str) -> bool:
    """Whether a placement's constructor takes ``keyword`` (by name, or through ``**kwargs``)."""
    parameters = inspect.signature(placement).parameters
    return keyword in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _same_norm(a: str, b: str) -> bool:
    return a == b or same_plugin("norm", a, b)


class Andrea(nn.Module):
    """The ANDREA language model. ``forward(idx, targets=None)`` → ``(logits, loss or None)``."""

    def __init__(self, config: AndreaConfig):
        super().__init__()
        self.config = config
        components = resolve_components(config)  # the one place the names are resolved
        availability = check_availability(
            components.kernel_backend, describe_selection("kernel_backend", config.kernel_backend)
        )
        if not availability:
            raise BackendUnavailableError(
                f"kernel backend {config.kernel_backend!r} is not available here: {availability.reason}"
            )
        with raised_by("kernel_backend", config.kernel_backend, "its constructor"):
            backend = components.kernel_backend()
        self.token_embed = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embed = nn.Embedding(config.block_size, config.d_model)
        self.embed_dropout = nn.Dropout(config.dropout)
        norm = NormFactory(components.norm, backend, config.layer_norm_eps, config.bias, config.norm)
        kwargs = placement_kwargs(components.norm_placement, config, norm)  # the signature read once
        self.blocks = nn.ModuleList(Block(config, components, backend, norm, kwargs) for _ in range(config.n_layer))
        self.final_norm = norm(config.d_model) if components.norm_placement.final_norm else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embed.weight  # tied: one matrix, stored once
        self.apply(self._init_weights)
        self._initialise_placements()
        verify_plugins(self, components.by_kind(), own=(Andrea, Block, MLP, CausalSelfAttention))

    def _initialise_placements(self) -> None:
        """Each placement's own initialisation (``NormPlacement.initialise``: DeepNorm's β), after GPT-2's.
        A placement that does not subclass NormPlacement may lack the hook: it has nothing to initialise."""
        for s in self.sublayers():
            initialise = getattr(s.wiring, "initialise", None)
            if initialise is not None:
                with raised_by("norm_placement", self.config.norm_placement, "initialise()"):
                    initialise(self.config)

    def _init_weights(self, module: nn.Module) -> None:
        """GPT-2 initialisation: N(0, 0.02) for weights and embeddings, zero biases; the projections
        that write into the residual stream get std / sqrt(2·n_layer), so the stream's variance does
        not grow with depth at initialisation (each of the 2·n_layer sublayers adds one delta)."""
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if getattr(module, "is_residual_projection", False):
                std = std / math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(
                f"sequence length {T} exceeds the model's context (block_size "
                f"{self.config.block_size}); use at most {self.config.block_size} tokens"
            )
        positions = torch.arange(T, device=idx.device)
        x = self.config.embedding_scale * (self.token_embed(idx) + self.position_embed(positions))  # (B, T, C)
        x = self.embed_dropout(x)
        for block in self.blocks:
            x = block(x)
        logits = self.readout(x)  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss

    def readout(self, x: torch.Tensor) -> torch.Tensor:
        """The logits (B, T, vocab) of the last residual stream x (B, T, C): final norm, tied unembedding,
        then the soft cap ``final_logit_softcap`` if the config sets one (the logit lens decodes with this too)."""
        logits = self.lm_head(self.final_norm(x))
        if self.config.final_logit_softcap is not None:
            logits = softcap(logits, self.config.final_logit_softcap)
        return logits

    # ------------------------------------------------------------------ looking inside

    def sublayers(self) -> list[Sublayer]:
        """Every sublayer of the trunk in forward order: block 0 attention, block 0 MLP, block 1 ..."""
        return [
            Sublayer(i, kind, module, wiring)
            for i, block in enumerate(self.blocks)
            for kind, wiring, module in zip(SUBLAYER_KINDS, (block.attn, block.mlp), block.inner)
        ]

    @contextmanager
    def tap(
        self,
        on_stream: Callable[[Sublayer, torch.Tensor, torch.Tensor], None] | None = None,
        on_attention: Callable[[Sublayer, AttentionLogits], None] | None = None,
        on_hidden: Callable[[Sublayer, torch.Tensor], None] | None = None,
    ) -> Iterator[list[Sublayer]]:
        """Inside the ``with``, every forward pass calls back, sublayer by sublayer:

        * ``on_stream(sublayer, before, after)``: the residual stream (B, T, C) entering and leaving the
          sublayer's wiring; for pre-norm ``after - before`` is exactly what the sublayer adds;
        * ``on_attention(sublayer, logits)``: an attention sublayer's logits (:class:`AttentionLogits`);
        * ``on_hidden(sublayer, hidden)``: an MLP's activation output (B, T, hidden), before its projection.

        The tensors keep their autograd graph (detach what you keep). Forward hooks on the model's own
        modules: the forward itself has no branch for this, and nothing is called after the ``with``.
        """
        handles, sublayers = [], self.sublayers()

        def watch(module: nn.Module, s: Sublayer, call: Callable) -> None:
            def hook(m: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
                call(s, inputs[0], output)  # returns None: a hook's return value would replace the output

            handles.append(module.register_forward_hook(hook))

        for s in sublayers:
            if on_stream is not None:
                watch(s.wiring, s, on_stream)
            if on_attention is not None and s.kind == "attn":  # q and k as the logits are made of them
                watch(
                    s.module.logit_inputs,
                    s,
                    lambda s, q, qk: on_attention(s, AttentionLogits(*qk, softcap=s.module.softcap)),
                )
            if on_hidden is not None and s.kind == "mlp":
                watch(s.module.proj, s, lambda s, hidden, y: on_hidden(s, hidden))
        try:
            yield sublayers
        finally:
            for handle in handles:
                handle.remove()

    def num_parameters(self) -> int:
        """Parameters stored (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``idx`` (B, T); keeps the last block_size as context."""
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k must be a positive integer or None, got {top_k}")
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :].float()
            if temperature == 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                next_id = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, next_id), dim=1)
        return idx


#: The kinds of sublayer in a block, in forward order.
SUBLAYER_KINDS = ("attn", "mlp")


@dataclass(frozen=True)
class Sublayer:
    """One sublayer of the trunk as seen from outside (:meth:`Andrea.sublayers`)."""

    block: int  # index of its block, from 0 at the input
    kind: str  # "attn" or "mlp" (SUBLAYER_KINDS)
    module: nn.Module  # the sublayer itself: CausalSelfAttention or MLP
    wiring: nn.Module  # the norm placement around it: stream before → stream after


class AttentionLogits:
    """The logits one attention sublayer's softmax gets, q·kᵀ/√hs of q and k after the QK norm (soft-capped,
    ``cap·tanh(·/cap)``, when the model caps them), kept as q and k (B, nh, T, hs): all heads at once are
    B·nh·T² numbers, so a caller materialises the heads it asks for."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, softcap: float | None = None):
        self.q, self.k = q, k
        self.softcap = softcap
        self.n_head = q.shape[1]
        T = q.shape[-2]
        #: A query's future positions, built once for every head slice a caller asks for.
        self.future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)

    def __call__(self, heads: slice = slice(None)) -> torch.Tensor:
        """The logits of ``heads`` in float32, (B, h, T, T); a query's future positions are -inf (masked)."""
        q, k = self.q[:, heads].float(), self.k[:, heads].float()
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.softcap is not None:
            logits = softcap(logits, self.softcap)
        return logits.masked_fill_(self.future, -math.inf)
