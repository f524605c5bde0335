import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from andrea_lab import Andrea, preset
from andrea_lab.model.config import ConfigError
from andrea_lab.model.registry import PluginError
from andrea_lab.model.transformer import CausalSelfAttention


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


def test_an_untied_head_is_a_matrix_of_its_own_that_trains_apart_from_the_embedding():
    tied, untied = Andrea(tiny()), Andrea(tiny(tie_embeddings=False))
    assert untied.lm_head.weight is not untied.token_embed.weight
    assert untied.num_parameters() == tied.num_parameters() + 257 * tied.config.d_model
    idx = torch.randint(0, 257, (2, 9))
    _, loss = untied(idx, torch.randint(0, 257, (2, 9)))
    loss.backward()
    # The head's gradient is its own; the embedding's comes from the input side only (rows of tokens in idx).
    used = torch.zeros(257, dtype=torch.bool)
    used[idx.unique()] = True
    assert untied.lm_head.weight.grad.abs().sum() > 0
    assert untied.token_embed.weight.grad[~used].abs().sum() == 0
    assert untied.lm_head.weight.std().item() == pytest.approx(untied.config.init_std, rel=0.1)


@pytest.mark.parametrize("placement", ["pre", "peri"])
def test_embedding_scale_multiplies_the_stream_the_first_block_reads_and_nothing_else(placement):
    torch.manual_seed(0)
    plain, scaled = Andrea(tiny(norm_placement=placement)), Andrea(tiny(norm_placement=placement, embedding_scale=8.0))
    scaled.load_state_dict(plain.state_dict())  # the same weights: the scale is not an initialisation
    idx = torch.randint(0, 257, (2, 9))
    first = []
    with scaled.tap(on_stream=lambda s, before, after: first.append(before)):
        logits, _ = scaled(idx)
    torch.testing.assert_close(first[0], 8.0 * (plain.token_embed(idx) + plain.position_embed(torch.arange(9))))
    assert not torch.allclose(logits, plain(idx)[0])


def test_tie_embeddings_must_be_a_boolean():
    with pytest.raises(ConfigError, match="tie_embeddings must be true or false, got 'no'"):
        tiny(tie_embeddings="no")


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
    with pytest.raises(
        PluginError, match="unknown kernel_backend .triton.; installed in andrea_lab.kernel_backend: .*torch"
    ):
        Andrea(tiny(kernel_backend="triton"))


def test_each_plugin_is_resolved_once_per_model_and_handed_down(monkeypatch):
    import andrea_lab.model.components
    from andrea_lab.model.registry import resolve

    calls = []
    monkeypatch.setattr(
        andrea_lab.model.components, "resolve", lambda kind, name: calls.append(kind) or resolve(kind, name)
    )
    Andrea(preset("andrea-micro", n_layer=3))
    assert sorted(calls) == ["activation", "kernel_backend", "norm", "norm_placement"]


# ---------------------------------------------------------------- looking inside: sublayers() and tap()


def test_sublayers_list_every_block_in_forward_order():
    from andrea_lab.model.transformer import MLP, CausalSelfAttention

    model = Andrea(tiny(n_layer=3, norm_placement="post"))
    found = [(s.block, s.kind, type(s.module), s.wiring) for s in model.sublayers()]
    assert found == [
        (i, kind, cls, getattr(model.blocks[i], kind))
        for i in range(3)
        for kind, cls in (("attn", CausalSelfAttention), ("mlp", MLP))
    ]
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


# ------------------------------------------------------------------ the defaults stay the parent commit's


def _parent_attention(self, x):
    """CausalSelfAttention.forward as it was before the soft cap (commit b7e4515), verbatim."""
    B, T, C = x.shape
    q, k, v = self.heads(self.qkv(x))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return self.resid_dropout(self.proj(y))


def _parent_forward(model, idx, targets):
    """Andrea._forward as it was before the final soft cap (commit b7e4515), on the parent's attention."""
    positions = torch.arange(idx.shape[1], device=idx.device)
    x = model.embed_dropout(model.token_embed(idx) + model.position_embed(positions))
    for block in model.blocks:
        x = block(x)
    logits = model.lm_head(model.final_norm(x))
    return logits, F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def _twenty_steps(forward) -> tuple[torch.Tensor, list[float]]:
    torch.manual_seed(0)
    model = Andrea(tiny(block_size=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 257, (20, 4, 33), generator=torch.Generator().manual_seed(1))
    first_logits, losses = None, []
    for batch in data:
        logits, loss = forward(model, batch[:, :-1], batch[:, 1:])
        first_logits = logits.detach() if first_logits is None else first_logits
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return first_logits, losses


def test_default_model_is_bit_identical_to_the_parent_commit(monkeypatch):
    """With no cap, the logits at init and a 20-step loss curve are exactly those of the code before the caps."""
    logits, losses = _twenty_steps(lambda model, x, y: model(x, y))
    monkeypatch.setattr(CausalSelfAttention, "forward", _parent_attention)
    parent_logits, parent_losses = _twenty_steps(_parent_forward)
    assert torch.equal(logits, parent_logits)
    assert losses == parent_losses


def test_final_logit_softcap_squashes_the_logits_the_loss_sees():
    torch.manual_seed(0)
    capped = Andrea(tiny(final_logit_softcap=0.5))
    plain = Andrea(tiny())
    plain.load_state_dict(capped.state_dict())
    idx = torch.randint(0, 257, (2, 9))
    logits, loss = capped(idx, idx)
    raw, _ = plain(idx)
    torch.testing.assert_close(logits, 0.5 * torch.tanh(raw / 0.5))
    assert logits.abs().max() < 0.5
    torch.testing.assert_close(loss, F.cross_entropy(logits.reshape(-1, 257), idx.reshape(-1)))


# ------------------------------------------------------------ defaults: today's model, bit for bit


def gpt2_keys(n_layer: int) -> set[str]:
    """The default model's state-dict keys, as every checkpoint written so far has them."""
    per_block = [f"{s}.norm.{p}" for s in ("attn", "mlp") for p in ("weight", "bias")] + [
        f"{s}.sublayer.{m}.{p}"
        for s, m in (("attn", "qkv"), ("attn", "proj"), ("mlp", "fc"), ("mlp", "proj"))
        for p in ("weight", "bias")
    ]
    return {"token_embed.weight", "position_embed.weight", "final_norm.weight", "final_norm.bias", "lm_head.weight"} | {
        f"blocks.{i}.{key}" for i in range(n_layer) for key in per_block
    }


def reference_forward(w: dict, idx: torch.Tensor, n_head: int) -> torch.Tensor:
    """The pre-norm GELU ANDREA written out with functional ops, from the weights by their checkpoint names."""
    import torch.nn.functional as F

    B, T = idx.shape
    ln = lambda x, key: F.layer_norm(x, x.shape[-1:], w[f"{key}.weight"], w[f"{key}.bias"], 1e-5)  # noqa: E731
    lin = lambda x, key: F.linear(x, w[f"{key}.weight"], w[f"{key}.bias"])  # noqa: E731
    x = w["token_embed.weight"][idx] + w["position_embed.weight"][:T]
    for i in range(sum(key.endswith("attn.norm.weight") for key in w)):
        p = f"blocks.{i}"
        qkv = lin(ln(x, f"{p}.attn.norm"), f"{p}.attn.sublayer.qkv")
        q, k, v = (t.view(B, T, n_head, -1).transpose(1, 2) for t in qkv.split(x.shape[-1], dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.0)
        x = x + lin(y.transpose(1, 2).contiguous().view(B, T, -1), f"{p}.attn.sublayer.proj")
        h = F.gelu(lin(ln(x, f"{p}.mlp.norm"), f"{p}.mlp.sublayer.fc"), approximate="tanh")
        x = x + lin(h, f"{p}.mlp.sublayer.proj")
    return F.linear(ln(x, "final_norm"), w["token_embed.weight"])


def test_default_model_is_todays_bit_for_bit_logits_and_a_20_step_loss_curve():
    torch.manual_seed(0)
    model = Andrea(tiny())
    assert set(model.state_dict()) == gpt2_keys(model.config.n_layer), "old checkpoints must load"
    weights = {name: p.detach().clone().requires_grad_() for name, p in model.named_parameters()}
    weights["lm_head.weight"] = weights["token_embed.weight"]  # tied, as in the model
    idx = torch.randint(0, 257, (2, 24))
    targets = torch.roll(idx, -1, 1)
    assert torch.equal(model(idx)[0], reference_forward(weights, idx, model.config.n_head))
    ours = torch.optim.AdamW(model.parameters(), lr=1e-2)
    theirs = torch.optim.AdamW(list(dict.fromkeys(weights.values())), lr=1e-2)
    for _ in range(20):
        _, loss = model(idx, targets)
        logits = reference_forward(weights, idx, model.config.n_head)
        reference = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        assert loss.item() == reference.item()
        for optimizer, value in ((ours, loss), (theirs, reference)):
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
    assert loss.item() < math.log(257) - 1, "the curve is a trained one, not a flat line"


# ------------------------------------------------------------ QK norm, and placements of the first contract


def test_qk_norm_adds_one_norm_for_q_and_one_for_k_over_the_head_size():
    model = Andrea(tiny(qk_norm=True))
    attention = model.blocks[0].inner[0]
    hs = model.config.head_size
    assert attention.q_norm.weight.shape == attention.k_norm.weight.shape == (hs,)
    assert set(model.state_dict()) - gpt2_keys(model.config.n_layer) == {
        f"blocks.{i}.attn.sublayer.{qk}_norm.{p}" for i in range(2) for qk in "qk" for p in ("weight", "bias")
    }
    q, k, _ = attention.project(torch.randn(2, 5, model.config.d_model))
    # LayerNorm at its initial gain 1: each head's query has mean 0 and variance 1 over the head size.
    torch.testing.assert_close(q.mean(-1), torch.zeros_like(q.mean(-1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(k.var(-1, unbiased=False), torch.ones_like(k[..., 0]), atol=1e-3, rtol=0)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_tapped_attention_logits_are_the_softmax_inputs_after_the_qk_norm(qk_norm):
    torch.manual_seed(0)
    model = Andrea(tiny(qk_norm=qk_norm)).eval()
    attention = model.sublayers()[0].module
    with torch.no_grad():  # QK norms with non-trivial gains, so a tap before them would show other logits
        for module in (attention.q_norm, attention.k_norm):
            for p in module.parameters():
                p.normal_()
    taps, mixed = {}, {}
    attention.proj.register_forward_hook(lambda m, i, o: mixed.update(y=i[0]))
    attention.qkv.register_forward_hook(lambda m, i, o: mixed.update(v=attention.heads(o)[2]))
    with model.tap(on_attention=lambda s, logits: taps.setdefault(s.block, logits)):
        model(torch.randint(0, 257, (2, 7)))
    y = (torch.softmax(taps[0](), dim=-1) @ mixed["v"]).transpose(1, 2).reshape(2, 7, -1)
    torch.testing.assert_close(y, mixed["y"])


class FirstContractPlacement(nn.Module):
    """A third-party pre-norm written before the norm kind: no norm=, builds contracts.LayerNorm itself."""

    contract_version = 1
    final_norm = True

    def __init__(self, d_model, sublayer, backend, eps=1e-5, bias=True):
        from andrea_lab.model.contracts import LayerNorm

        super().__init__()
        self.sublayer, self.norm = sublayer, LayerNorm(d_model, backend, eps=eps, bias=bias)

    def forward(self, x):
        return x + self.sublayer(self.norm(x))


@pytest.mark.usefixtures("import_paths")
def test_a_first_contract_placement_still_builds_and_is_refused_with_another_norm():
    from andrea_lab.model.config import ConfigError

    name = f"{__name__}:FirstContractPlacement"
    torch.manual_seed(0)
    legacy = Andrea(tiny(norm_placement=name))
    torch.manual_seed(0)
    builtin = Andrea(tiny())
    idx = torch.randint(0, 257, (2, 9))
    assert torch.equal(legacy(idx)[0], builtin(idx)[0])
    with pytest.raises(ConfigError, match=r"takes no norm= factory.*norm 'rmsnorm' cannot reach its norms"):
        Andrea(tiny(norm_placement=name, norm="rmsnorm"))
