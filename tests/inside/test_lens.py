"""The logit lens and direct logit attribution on micro models of every built-in placement and the example
plugin's: the lens ends at the model's logits, the attribution adds up to the logit, a known writer is found."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from andrea_lab.data.heldout import HeldOutDataset, clustered_mean, plan_heldout
from andrea_lab.errors import UsageError
from andrea_lab.inside import lens
from andrea_lab.inside.lens_loss import LayerLoss, blocks_to_final, heldout_lens, lens_losses
from andrea_lab.inside.lens_plots import plot_attribution, plot_lens_grid
from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea

#: Every built-in placement and the third-party one of plugins/andrea-lab-example.
PLACEMENTS = ["pre", "post", "no_residual", "andrea-lab-example:sandwich"]
IDS = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]


def micro(placement: str = "pre", **overrides) -> Andrea:
    """A micro model whose norms have random affine parameters (so a missed γ or β shows in the numbers)."""
    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", n_layer=3, norm_placement=placement, **overrides)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.normal_(1.0, 0.5)
                module.bias.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_the_lens_after_the_last_sublayer_is_the_models_own_logits(placement):
    model = micro(placement)
    streams = lens.capture_streams(model, IDS)
    assert streams.labels == ["embed"] + [f"{b}.{k}" for b in range(3) for k in ("attn", "mlp")]
    assert torch.equal(lens.decode(model, streams.states[-1]), streams.logits)
    rows = lens.lens_rows(model, streams, 4, IDS[5], k=3)
    assert rows[-1].top[0][0] == int(streams.logits[4].argmax())
    probs = torch.softmax(streams.logits[4], -1)
    assert rows[-1].next_prob == pytest.approx(float(probs[IDS[5]]))
    assert rows[-1].next_rank == int((probs > probs[IDS[5]]).sum()) + 1


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("position", [0, 6, -1])
def test_attribution_terms_add_up_to_the_logit(placement, position):
    model = micro(placement, activation="swiglu" if placement == "pre" else "gelu")
    streams = lens.capture_streams(model, IDS)
    pos = position % len(IDS)
    for token in (int(streams.logits[pos].argmax()), 7):
        attribution = lens.attribute(model, streams, pos, token)
        assert [label for label, _ in attribution.terms] == [*streams.labels, lens.NORM_BIAS]
        assert attribution.logit == pytest.approx(float(streams.logits[pos, token]))
        assert attribution.total == pytest.approx(attribution.logit, abs=1e-4)
        assert (attribution.scale is None) == (placement == "post")


def test_a_one_block_model_whose_mlp_writes_a_known_direction_is_attributed_to_that_mlp():
    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", n_layer=1)).eval()
    target = 42
    direction = model.token_embed.weight[target].detach().clone()
    with torch.no_grad():
        attention, mlp = model.blocks[0].inner
        attention.proj.weight.zero_()
        attention.proj.bias.zero_()  # attention writes nothing
        mlp.proj.weight.zero_()
        mlp.proj.bias.copy_(50 * direction)  # the MLP writes the target's unembedding direction, at every token
    streams = lens.capture_streams(model, IDS)
    attribution = lens.attribute(model, streams, 3, target)
    terms = dict(attribution.terms)
    assert int(streams.logits[3].argmax()) == target
    assert max(terms, key=terms.get) == "0.mlp"
    assert terms["0.attn"] == pytest.approx(0.0, abs=1e-6)
    assert terms["0.mlp"] > 10 * abs(terms["embed"])
    # the lens sees it too: the target is not predicted from the embedding, and is after the MLP
    rows = lens.lens_rows(model, streams, 3, None, k=1)
    assert rows[0].top[0][0] != target and rows[-1].top[0][0] == target


@pytest.mark.parametrize("norm", [nn.LayerNorm(8), nn.RMSNorm(8, eps=1e-6), nn.Identity()])
def test_the_frozen_norm_is_the_norm_at_the_stream_it_was_frozen_at(norm):
    torch.manual_seed(1)
    if not isinstance(norm, nn.Identity):
        nn.init.normal_(norm.weight)
    stream = torch.randn(8) * 3 + 1
    linear, offset, _ = lens.frozen_final_norm(norm, stream)
    assert torch.allclose(linear(stream) + offset, norm(stream), atol=1e-5)
    with pytest.raises(UsageError, match="final norm is GroupNorm"):
        lens.frozen_final_norm(nn.GroupNorm(2, 8), stream)


def test_the_last_depths_held_out_loss_is_the_models_own():
    model = micro("pre")
    tokens = np.random.default_rng(0).integers(0, 257, size=2000).astype(np.int64)
    tokens[::97] = 256  # document boundaries
    plan = plan_heldout(tokens, 32, eot_id=256, max_tokens=640, seed=0)
    dataset = HeldOutDataset(tokens, plan)
    x, y, _ = (torch.stack(parts) for parts in zip(*(dataset[i] for i in range(4))))
    per_token = lens_losses(model, x, y)
    assert per_token.shape == (4, 4, 32)  # embedding + 3 blocks
    logits, _ = model(x)
    assert torch.allclose(
        per_token[-1], F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape), atol=1e-5
    )
    layers, scored = heldout_lens(model, dataset, batch_size=3)
    assert [layer.layer for layer in layers] == ["embed", "block 0", "block 1", "block 2"]
    sums, counts = np.zeros(plan.unit_count), np.zeros(plan.unit_count)
    for i in range(len(dataset)):
        xi, yi, units = dataset[i]
        losses = F.cross_entropy(model(xi[None])[0][0], yi, reduction="none").detach().double().numpy()
        np.add.at(sums, units.numpy(), losses)
        np.add.at(counts, units.numpy(), 1)
    loss, se = clustered_mean(sums, counts)
    assert layers[-1].loss == pytest.approx(loss, rel=1e-5) and layers[-1].se == pytest.approx(se, rel=1e-4)
    assert scored["tokens"] == 640 and scored["se_unit"] == "documents" and scored["documents"] > 2


def test_blocks_to_final_is_the_first_depth_within_the_tolerance():
    layers = [
        LayerLoss(name, loss, 0.01)
        for name, loss in [("embed", 7.0), ("block 0", 5.0), ("block 1", 4.05), ("block 2", 4.2), ("block 3", 4.0)]
    ]
    assert blocks_to_final(layers) == 2
    assert blocks_to_final(layers, tolerance=0.01) == 4
    assert blocks_to_final([LayerLoss("embed", 1.0, None)]) == 0


def test_the_lens_pictures(tmp_path):
    model = micro("pre")
    streams = lens.capture_streams(model, IDS)
    grid = lens.lens_grid(model, streams)
    assert len(grid.top_ids) == 7 and len(grid.top_ids[0]) == len(IDS)
    assert grid.top_ids[-1] == streams.logits.argmax(-1).tolist()
    heatmap = plot_lens_grid(grid, [chr(i) for i in IDS], chr, tmp_path / "lens.png", next_ids=IDS[1:])
    bars = plot_attribution(lens.attribute(model, streams, 3, 7), "x", tmp_path / "attribution.png")
    for png in (heatmap, bars):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_gap_to_the_final_loss_has_a_paired_standard_error():
    model = micro("pre")
    tokens = np.random.default_rng(1).integers(0, 256, size=3000).astype(np.int64)
    tokens[::101] = 256
    dataset = HeldOutDataset(tokens, plan_heldout(tokens, 32, eot_id=256, max_tokens=960, seed=0))
    layers, _ = heldout_lens(model, dataset, batch_size=8)
    assert layers[-1].se_vs_final == 0.0  # the final depth against itself
    assert all(layer.se_vs_final is not None and layer.se_vs_final > 0 for layer in layers[:-1])


def test_the_lens_decodes_through_the_final_soft_cap_as_the_model_does():
    model = micro(final_logit_softcap=0.2)
    streams = lens.capture_streams(model, IDS)
    assert torch.equal(lens.decode(model, streams.states[-1]), streams.logits)
    assert streams.logits.abs().max() < 0.2


def test_with_a_final_soft_cap_the_attribution_is_of_the_pre_cap_logit_and_says_so():
    """The terms add up to the pre-cap logit (the uncapped twin's logit), not to the capped one the model
    outputs; the capped logit and the model's probability are reported beside it, and labelled."""
    cap = 0.1
    model = micro(final_logit_softcap=cap)
    twin = micro()  # the same weights without the cap: its logits are the pre-cap ones
    twin.load_state_dict(model.state_dict())
    streams = lens.capture_streams(model, IDS)
    raw = lens.capture_streams(twin, IDS).logits
    for pos in (4, len(IDS) - 1):
        token = int(raw[pos].abs().argmax())  # where the cap bites most: pre-cap and capped differ clearly
        assert abs(float(raw[pos, token])) > 3 * cap
        attribution = lens.attribute(model, streams, pos, token)
        assert attribution.logit == pytest.approx(float(raw[pos, token]), abs=1e-5)
        assert attribution.total == pytest.approx(attribution.logit, abs=1e-4)
        assert attribution.output_logit == float(streams.logits[pos, token])
        assert attribution.output_logit == pytest.approx(cap * np.tanh(attribution.logit / cap), abs=1e-6)
        assert attribution.output_prob == pytest.approx(float(torch.softmax(streams.logits[pos], -1)[token]))
        assert abs(attribution.total - attribution.output_logit) > cap  # the capped logit is not the sum
        as_dict = attribution.as_dict()
        assert as_dict["softcap"] == cap and as_dict["attributed"].startswith("the pre-cap logit")
        text = lens.format_attribution(attribution)
        assert "pre-cap logit" in text and "capped (output)" in text and "model logit" not in text
    plain = lens.attribute(twin, lens.capture_streams(twin, IDS), 4, 7)
    assert plain.softcap is None and plain.attributed == "the output logit" and plain.output_logit == plain.logit
    assert "model logit" in lens.format_attribution(plain)


def test_with_a_final_soft_cap_the_lens_ends_at_the_models_own_capped_probabilities():
    cap = 0.1
    model = micro(final_logit_softcap=cap)
    twin = micro()
    twin.load_state_dict(model.state_dict())
    streams = lens.capture_streams(model, IDS)
    rows = lens.lens_rows(model, streams, 4, IDS[5], k=3)
    own = torch.softmax(streams.logits[4], -1)
    uncapped = torch.softmax(lens.capture_streams(twin, IDS).logits[4], -1)
    assert [i for i, _ in rows[-1].top] == own.topk(3).indices.tolist()
    for token, p in rows[-1].top:
        assert p == pytest.approx(float(own[token]), rel=1e-6)
        assert abs(p - float(uncapped[token])) > 1e-3  # a lens decoded without the cap would differ
    assert rows[-1].next_prob == pytest.approx(float(own[IDS[5]]), rel=1e-6)
    assert "final soft cap 0.1" in lens.final_norm_description(model)
    assert "soft cap" not in lens.final_norm_description(twin)
