"""trace_token: one row per sublayer, the right numbers, and a plot."""

from __future__ import annotations

import math

import pytest
import torch

from andrea_lab.inside.trace import format_table, plot_trace, resolve_position, trace_token
from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea


def micro(**overrides) -> Andrea:
    torch.manual_seed(0)
    return Andrea(preset("andrea-micro", **overrides))


IDS = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_one_row_per_sublayer_with_finite_numbers(placement):
    trace = trace_token(micro(n_layer=3, norm_placement=placement), IDS)
    assert [(r.block, r.sublayer) for r in trace.rows] == [(b, s) for b in range(3) for s in ("attn", "mlp")]
    for row in trace.rows:
        for value in (row.stream_norm, row.delta_norm, row.cosine, row.ratio):
            assert math.isfinite(value)
        assert -1.0 - 1e-6 <= row.cosine <= 1.0 + 1e-6
    assert trace.position == len(IDS) - 1 and trace.length == len(IDS) and trace.token_id == IDS[-1]
    assert 0.0 < trace.next_token_prob <= 1.0


def test_pre_norm_numbers_match_a_manual_forward():
    model = micro().eval()
    position = 4
    trace = trace_token(model, IDS, position)
    idx = torch.tensor([IDS])
    with torch.no_grad():
        x = model.token_embed(idx) + model.position_embed(torch.arange(len(IDS)))
        attn = model.blocks[0].attn
        delta = attn.sublayer(attn.norm(x))[0, position]  # pre-norm: the delta is the sublayer's output
        stream = x[0, position]
    first = trace.rows[0]
    assert first.stream_norm == pytest.approx(stream.norm().item(), rel=1e-5)
    assert first.delta_norm == pytest.approx(delta.norm().item(), rel=1e-5)
    assert first.cosine == pytest.approx(torch.cosine_similarity(delta, stream, dim=0).item(), abs=1e-5)
    # Each sublayer's input is the previous one's output: stream_{i+1} = stream_i + delta_i.
    second = trace.rows[1]
    assert second.stream_norm == pytest.approx((stream + delta).norm().item(), rel=1e-5)


def test_the_trace_does_not_depend_on_later_tokens():
    model = micro()
    short = trace_token(model, IDS[:5], position=-1)
    long = trace_token(model, IDS, position=4)
    assert [r.delta_norm for r in short.rows] == pytest.approx([r.delta_norm for r in long.rows], rel=1e-5)


def test_positions_are_python_indices():
    assert resolve_position(-1, 5) == 4 and resolve_position(0, 5) == 0 and resolve_position(-5, 5) == 0
    for bad in (5, -6):
        with pytest.raises(ValueError, match="outside the text's 5 tokens"):
            resolve_position(bad, 5)
    with pytest.raises(ValueError, match="no tokens"):
        trace_token(micro(), [], 0)
    with pytest.raises(ValueError, match="longer than the model's context"):
        trace_token(micro(), list(range(65)), 0)


def test_model_mode_is_restored():
    model = micro(dropout=0.1).train()
    trace_token(model, IDS)
    assert model.training


def test_table_and_plot(tmp_path):
    trace = trace_token(micro(), IDS)
    table = format_table(trace)
    assert len(table.splitlines()) == 2 + 4 + 1
    assert "0  attn" in table and "1  mlp" in table
    png = plot_trace(trace, tmp_path / "plots" / "trace.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
