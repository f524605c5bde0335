import math

import pytest
import torch
from torch import nn

from andrea_lab import Andrea, preset
from andrea_lab.registry import PluginError


def tiny(**overrides):
    return preset("andrea-micro", **overrides)


def test_forward_returns_logits_and_loss():
    torch.manual_seed(0)
    model = Andrea(tiny())
    idx = torch.randint(0, 257, (3, 17))
    logits, loss = model(idx)
    assert logits.shape == (3, 17, 257) and loss is None
    logits, loss = model(idx, torch.randint(0, 257, (3, 17)))
    # At GPT-2 initialisation the predictions are near uniform: loss close to ln(vocab).
    assert abs(loss.item() - math.log(257)) < 0.3


def test_tied_embedding_shares_storage():
    model = Andrea(tiny())
    assert model.lm_head.weight is model.token_embed.weight
    assert model.lm_head.weight.data_ptr() == model.token_embed.weight.data_ptr()


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_causality_later_tokens_never_change_earlier_logits(placement):
    torch.manual_seed(0)
    model = Andrea(tiny(norm_placement=placement)).eval()
    idx = torch.randint(0, 257, (1, 24))
    changed = idx.clone()
    changed[0, 12:] = torch.randint(0, 257, (12,))
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_gpt2_initialisation_scales_residual_projections():
    torch.manual_seed(0)
    model = Andrea(preset("andrea-tiny"))
    std_fc = model.blocks[0].mlp.sublayer.fc.weight.std().item()
    std_proj = model.blocks[0].mlp.sublayer.proj.weight.std().item()
    assert std_fc == pytest.approx(0.02, rel=0.05)
    assert std_proj == pytest.approx(0.02 / math.sqrt(2 * 4), rel=0.05)
    assert torch.count_nonzero(model.blocks[0].mlp.sublayer.fc.bias) == 0


def test_context_longer_than_positions_is_refused():
    model = Andrea(tiny())
    with pytest.raises(ValueError, match="sequence length 65 exceeds the model's context"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_generate_appends_tokens_and_is_seeded():
    torch.manual_seed(0)
    model = Andrea(tiny()).eval()
    idx = torch.zeros(1, 3, dtype=torch.long)
    a = model.generate(idx, 10, top_k=5, generator=torch.Generator().manual_seed(1))
    b = model.generate(idx, 10, top_k=5, generator=torch.Generator().manual_seed(1))
    assert a.shape == (1, 13) and torch.equal(a, b)
    greedy = model.generate(torch.zeros(1, 70, dtype=torch.long), 2, temperature=0)
    assert greedy.shape == (1, 72)  # contexts longer than block_size are cropped to the last 64


def test_norm_counts_pre_and_post():
    count = lambda m: sum(isinstance(x, nn.LayerNorm) for x in m.modules())  # noqa: E731
    with torch.device("meta"):
        assert count(Andrea(preset("andrea-120m"))) == 25
        assert count(Andrea(preset("andrea-120m", norm_placement="post"))) == 24


def test_unknown_backend_fails_when_the_model_is_built():
    with pytest.raises(PluginError, match="unknown kernel_backend .triton.; installed in andrea_lab.kernel_backend: .*torch"):
        Andrea(tiny(kernel_backend="triton"))


def test_each_plugin_is_resolved_once_per_model_and_handed_down(monkeypatch):
    import andrea_lab.config
    from andrea_lab.registry import resolve

    calls = []
    monkeypatch.setattr(andrea_lab.config, "resolve", lambda kind, name: calls.append(kind) or resolve(kind, name))
    Andrea(preset("andrea-micro", n_layer=3))
    assert sorted(calls) == ["activation", "kernel_backend", "norm", "norm_placement"]


# ---------------------------------------------------------------- looking inside: sublayers() and tap()

def test_sublayers_list_every_block_in_forward_order():
    from andrea_lab.model import MLP, CausalSelfAttention

    model = Andrea(tiny(n_layer=3, norm_placement="post"))
    found = [(s.block, s.kind, type(s.module), s.wiring) for s in model.sublayers()]
    assert found == [(i, kind, cls, getattr(model.blocks[i], kind)) for i in range(3)
                     for kind, cls in (("attn", CausalSelfAttention), ("mlp", MLP))]
    assert not any(".inner" in key for key in model.state_dict()), "the state dict keeps its names"


@pytest.mark.parametrize("placement", ["pre", "post", "no_residual"])
def test_tap_reports_the_stream_around_each_sublayer(placement):
    torch.manual_seed(0)
    model = Andrea(tiny(norm_placement=placement)).eval()
    idx = torch.randint(0, 257, (2, 9))
    seen = []
    with model.tap(on_stream=lambda s, before, after: seen.append((s, before, after))):
        logits, _ = model(idx)
    stream = model.token_embed(idx) + model.position_embed(torch.arange(9))
    for s, before, after in seen:  # each wiring's input is the previous one's output
        torch.testing.assert_close(before, stream)
        torch.testing.assert_close(after, s.wiring(before))
        stream = after
    assert [(s.block, s.kind) for s, _, _ in seen] == [(s.block, s.kind) for s in model.sublayers()]
    torch.testing.assert_close(logits, model.lm_head(model.final_norm(stream)))


def test_attention_logits_are_the_ones_attention_softmaxes():
    """softmax(logits) @ v must give the attention's output before its projection, and the future is masked."""
    torch.manual_seed(0)
    model = Andrea(tiny()).eval()
    taps, mixed = {}, {}
    attention = model.sublayers()[0].module
    attention.proj.register_forward_hook(lambda m, i, o: mixed.update(y=i[0]))
    attention.qkv.register_forward_hook(lambda m, i, o: mixed.update(v=attention.heads(o)[2]))
    with model.tap(on_attention=lambda s, logits: taps.setdefault(s.block, logits)):
        model(torch.randint(0, 257, (2, 7)))
    logits = taps[0]()
    assert logits.shape == (2, model.config.n_head, 7, 7) and torch.isinf(logits[..., 0, 1:]).all()
    y = (torch.softmax(logits, dim=-1) @ mixed["v"]).transpose(1, 2).reshape(2, 7, -1)
    torch.testing.assert_close(y, mixed["y"])
    torch.testing.assert_close(taps[0](slice(1, 2)), logits[:, 1:2])
    assert sorted(taps) == [0, 1]


def test_tap_hidden_is_the_activation_output_and_hooks_go_away():
    torch.manual_seed(0)
    model = Andrea(tiny(activation="relu")).eval()
    idx = torch.randint(0, 257, (1, 5))
    hidden = {}
    with model.tap(on_hidden=lambda s, h: hidden.setdefault(s.block, h)):
        model(idx)
    mlp, wiring = model.sublayers()[1].module, model.sublayers()[1].wiring
    stream = model.sublayers()[0].wiring(model.token_embed(idx) + model.position_embed(torch.arange(5)))
    torch.testing.assert_close(hidden[0], torch.relu(mlp.fc(wiring.norm(stream))))
    calls = []
    with model.tap(on_stream=lambda *a: calls.append(1)):
        pass
    model(idx)
    assert calls == [], "nothing is called after the with"
