"""andrea_lab/model/softcap.py: the capped attention of both paths against an explicit float64 reference, and the
cap."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from andrea_lab.model.softcap import (
    explicit_softcapped_attention,
    flex_softcapped_attention,
    softcap,
    softcapped_attention,
)


def reference_attention(q, k, v, cap):
    """softmax(cap·tanh(q·kᵀ/√d / cap)) · v, causal, in float64, one query at a time (over its past only)."""
    q, k, v = q.double(), k.double(), v.double()
    rows = []
    for t in range(q.shape[-2]):
        scores = cap * torch.tanh(
            q[..., t : t + 1, :] @ k[..., : t + 1, :].transpose(-1, -2) / math.sqrt(q.shape[-1]) / cap
        )
        rows.append(torch.softmax(scores, dim=-1) @ v[..., : t + 1, :])
    return torch.cat(rows, dim=-2)


@pytest.fixture
def qkv():
    generator = torch.Generator().manual_seed(0)
    # Scaled up so that many logits are far beyond the cap: the tanh matters.
    return tuple(3 * torch.randn(2, 3, 11, 8, generator=generator) for _ in range(3))


def test_softcap_is_the_identity_near_zero_and_bounded():
    x = torch.tensor([-1e4, -3.0, 1e-4, 3.0, 1e4])
    y = softcap(x, 2.0)
    assert (y.abs() <= 2.0).all() and y[1].abs() < 2.0 and y[2] == pytest.approx(1e-4, rel=1e-6)
    assert torch.equal(y, -softcap(-x, 2.0))


def test_explicit_capped_attention_equals_the_reference(qkv):
    expected = reference_attention(*qkv, cap=2.0)
    torch.testing.assert_close(explicit_softcapped_attention(*qkv, 2.0).double(), expected, rtol=1e-5, atol=1e-5)
    # On the CPU the model takes the explicit path, gradients included (flex_attention has no CPU backward).
    q, k, v = (t.clone().requires_grad_() for t in qkv)
    softcapped_attention(q, k, v, 2.0).sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_flex_attention_score_mod_equals_the_reference(qkv):
    """The score_mod the CUDA path compiles, run by flex_attention's eager reference (forward only on the CPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": meant here
        got = flex_softcapped_attention(*qkv, 2.0, compiled=False)
    torch.testing.assert_close(got.double(), reference_attention(*qkv, cap=2.0), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_compiled_flex_attention_trains_like_the_explicit_attention_on_cuda(qkv):
    """The CUDA path (compiled flex_attention): forward and gradients equal the explicit computation's."""

    def run(attend):
        q, k, v = (t.cuda().requires_grad_() for t in qkv)
        out = attend(q, k, v, 2.0)
        out.square().sum().backward()
        return out.detach(), [t.grad for t in (q, k, v)]

    flex_out, flex_grads = run(softcapped_attention)
    out, grads = run(explicit_softcapped_attention)
    torch.testing.assert_close(flex_out, out, rtol=1e-4, atol=1e-4)
    for got, expected in zip(flex_grads, grads):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
