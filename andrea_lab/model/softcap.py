"""Soft-capping (Gemma 2): ``cap · tanh(x / cap)``, which is x for |x| ≪ cap and never leaves (-cap, cap).

Two places use it (``model.config.attn_logit_softcap`` and ``final_logit_softcap``, docs/stability.md):
the attention logits before the softmax, and the output logits before the loss.

The capped attention cannot go through ``F.scaled_dot_product_attention``, whose fused kernels take no
function of the scores. Where ``torch.nn.attention.flex_attention`` trains (CUDA) it applies the cap in its
``score_mod``, inside a kernel compiled by ``torch.compile``. On the CPU, flex_attention has no backward
(torch 2.13: "FlexAttention does not support backward on CPU") and its eager forward is an unfused
reference, so there the same function is computed explicitly: scores, cap, causal mask, softmax — one
(B, nh, T, T) tensor, like the eager attention of GPT-2. Both are checked against each other
(tests/model/test_softcap.py); the cost of either against SDPA is in docs/performance.md.
"""

from __future__ import annotations

import functools
import math

import torch
from torch.nn.attention.flex_attention import flex_attention


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap · tanh(x / cap)``: squashes x smoothly into (-cap, cap), the identity near 0."""
    return cap * torch.tanh(x / cap)


def explicit_softcapped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float) -> torch.Tensor:
    """Causal ``softmax(cap · tanh(q·kᵀ / √hs / cap)) · v`` with the (B, nh, T, T) scores materialised."""
    T = q.shape[-2]
    scores = softcap(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), cap)  # (B, nh, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(future, -math.inf), dim=-1) @ v  # (B, nh, T, hs)


@functools.cache
def _compiled_flex_attention():
    """flex_attention through torch.compile (built on first use): its eager form is an unfused reference."""
    return torch.compile(flex_attention, dynamic=False)


def flex_softcapped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float, compiled: bool = True
) -> torch.Tensor:
    """The same attention by flex_attention: the cap and the causal mask in one ``score_mod``."""

    def capped_causal(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return torch.where(q_idx >= kv_idx, softcap(score, cap), -math.inf)

    attend = _compiled_flex_attention() if compiled and not torch.compiler.is_compiling() else flex_attention
    return attend(q, k, v, score_mod=capped_causal)


def softcapped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float) -> torch.Tensor:
    """Causal attention of q, k, v (B, nh, T, hs) with soft-capped logits → (B, nh, T, hs): flex_attention
    where it trains, the explicit computation on the CPU (see the module doc)."""
    if q.device.type == "cpu":
        return explicit_softcapped_attention(q, k, v, cap)
    return flex_softcapped_attention(q, k, v, cap)
