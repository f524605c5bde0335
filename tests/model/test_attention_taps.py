"""The attention tap (``Andrea.tap(on_attention=...)``, :class:`AttentionLogits`: what the probe's attention
metrics read) sees the logits the softmax actually gets, after the QK norm and after the attention soft cap.

Each check is made where a misplaced tap would show: QK-norm gains far from 1, and queries and keys so
large that the raw logits exceed the cap many times (at initialisation they are far below any cap, so
a tap before the cap would pass unnoticed: softmax(cap·tanh(z/cap)) ≈ softmax(z) for |z| ≪ cap).
"""

from __future__ import annotations

import pytest
import torch

from andrea_lab.fit.stability.monitor import measure_probe
from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea, AttentionLogits

CAP = 0.5


def capped_model(qk_norm: bool) -> Andrea:
    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", qk_norm=qk_norm, attn_logit_softcap=CAP)).eval()
    attention = model.sublayers()[0].module
    with torch.no_grad():
        attention.qkv.weight[: 2 * model.config.d_model] *= 40.0  # large q and k: logits far beyond the cap
        if qk_norm:  # gains far from 1, so a tap before the QK norm would see other logits
            for module in (attention.q_norm, attention.k_norm):
                for p in module.parameters():
                    p.normal_(1.0, 1.0)
    return model


def tapped(model: Andrea, idx: torch.Tensor) -> tuple[AttentionLogits, torch.Tensor, torch.Tensor]:
    """Block 0's tapped logits, its v (B, nh, T, hs) and its attention output before the projection (B, T, C)."""
    attention, seen, taps = model.sublayers()[0].module, {}, {}
    attention.proj.register_forward_hook(lambda m, i, o: seen.update(y=i[0]))
    attention.qkv.register_forward_hook(lambda m, i, o: seen.update(v=attention.heads(o)[2]))
    with torch.no_grad(), model.tap(on_attention=lambda s, logits: taps.setdefault(s.block, logits)):
        model(idx)
    return taps[0], seen["v"], seen["y"]


@pytest.mark.parametrize("qk_norm", [False, True])
def test_the_tap_is_what_the_capped_softmax_gets(qk_norm):
    model = capped_model(qk_norm)
    idx = torch.randint(0, 257, (2, 9), generator=torch.Generator().manual_seed(1))
    logits, v, y = tapped(model, idx)
    raw = AttentionLogits(logits.q, logits.k)()  # the same q and k without the cap
    allowed = torch.isfinite(raw)
    assert raw[allowed].abs().max() > 8 * CAP, "the cap must bite for this test to see where the tap is"
    capped = logits()
    assert capped[allowed].abs().max() <= CAP
    B, T = idx.shape
    torch.testing.assert_close((torch.softmax(capped, -1) @ v).transpose(1, 2).reshape(B, T, -1), y)
    uncapped = (torch.softmax(raw, -1) @ v).transpose(1, 2).reshape(B, T, -1)
    assert not torch.allclose(uncapped, y, atol=1e-3), "softmax of the uncapped logits must differ"


def test_the_probes_max_attention_logit_is_after_the_cap():
    model = capped_model(qk_norm=True)
    idx = torch.randint(0, 257, (4, 16), generator=torch.Generator().manual_seed(2))
    logits, _, _ = tapped(model, idx)
    values = measure_probe(model, idx, idx)
    expected = logits()[torch.isfinite(logits())].max()
    assert values["attn_logit_max/block_00"] == pytest.approx(float(expected), rel=1e-5)
    assert values["attn_logit_max/block_00"] <= CAP
    raw = AttentionLogits(logits.q, logits.k)()
    assert raw[torch.isfinite(raw)].max() > 8 * CAP
