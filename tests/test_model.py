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
    assert sorted(calls) == ["activation", "kernel_backend", "norm_placement"]
