"""AndreaConfig.cpu_attention_fp32: the attention in float32 under the CPU's bf16 autocast, and nowhere else."""

import pytest
import torch
from andrea_testing import attention_input_dtypes

from andrea_lab import Andrea, preset
from andrea_lab.model.config import ConfigError


def _model(**overrides) -> Andrea:
    torch.manual_seed(0)
    return Andrea(preset("andrea-micro", **overrides))


def _loss(model: Andrea, tokens: torch.Tensor, autocast: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(tokens[:, :-1], tokens[:, 1:])[1]


def test_under_bf16_autocast_the_attention_runs_in_float32_and_trains_alike(monkeypatch):
    tokens = torch.randint(0, 257, (2, 17))
    plain, upcast = _model(vocab_size=257), _model(vocab_size=257, cpu_attention_fp32=True)
    seen = attention_input_dtypes(monkeypatch)
    bf16_loss = _loss(plain, tokens, autocast=True)
    assert seen and set(seen) == {torch.bfloat16}  # the default: autocast casts the attention down
    seen.clear()
    upcast_loss = _loss(upcast, tokens, autocast=True)
    assert seen and set(seen) == {torch.float32}
    upcast_loss.backward()  # the graph goes back through the casts
    assert all(p.grad is not None for p in upcast.parameters() if p.requires_grad)
    assert abs(upcast_loss.item() - bf16_loss.item()) < 0.02  # the same model, only the attention's precision
    assert upcast_loss.item() != bf16_loss.item()  # and that did change


def test_outside_autocast_it_changes_nothing_to_the_bit():
    tokens = torch.randint(0, 257, (2, 17))
    plain, upcast = _model(vocab_size=257), _model(vocab_size=257, cpu_attention_fp32=True)
    assert torch.equal(_loss(plain, tokens, autocast=False), _loss(upcast, tokens, autocast=False))


def test_it_must_be_a_boolean():
    with pytest.raises(ConfigError, match="cpu_attention_fp32 must be true or false, got 'yes'"):
        preset("andrea-micro", cpu_attention_fp32="yes")


def test_its_float32_attention_is_the_autocast_off_attention_to_the_bit_forward_and_backward():
    # Runs made with the autocast-off path (speed_equivalence_d64, the ladder's bf16 rungs) rerun to the bit.
    import torch.nn.functional as F

    from andrea_lab.model.transformer import CausalSelfAttention

    attention = _model(vocab_size=257, cpu_attention_fp32=True).blocks[0].attn.sublayer
    assert isinstance(attention, CausalSelfAttention)
    torch.manual_seed(1)
    qkv = torch.randn(2, 17, 3, 2, 32, dtype=torch.bfloat16)  # (B, T, q/k/v, heads, hs): as heads() views them
    results = []
    for compute in ("ours", "autocast off"):
        q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if compute == "ours":
                y = attention.attend_in_fp32(q, k, v)
            else:
                with torch.autocast("cpu", enabled=False):
                    y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y.detach(), q.grad, k.grad, v.grad))
    assert results[0][0].dtype == torch.float32
    assert all(torch.equal(ours, other) for ours, other in zip(*results))


def test_attention_dropout_keeps_the_autocast_off_path_in_float32(monkeypatch):
    model = _model(vocab_size=257, cpu_attention_fp32=True, dropout=0.1).train()
    seen = attention_input_dtypes(monkeypatch)
    _loss(model, torch.randint(0, 257, (2, 17)), autocast=True).backward()
    assert seen and set(seen) == {torch.float32}


def test_compiled_its_graph_holds_no_autocast_context_so_aotautograds_cache_keeps_it(tmp_path, monkeypatch):
    """An autocast context inside a compiled graph makes AOTAutograd's cache bypass it: every warm compile of
    the sweep's bf16 path re-traced the joint graph (~29 s a d256 fit). A bypass would show in Dynamo's counters."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", vocab_size=257, n_layer=1, cpu_attention_fp32=True))
    compiled = torch.compile(model)
    _loss(compiled, torch.randint(0, 257, (2, 17)), autocast=True).backward()
    assert counters["aot_autograd"]["ok"] == 1
    assert counters["aot_autograd"]["autograd_cache_bypass"] == 0, dict(counters["aot_autograd"])
    torch._dynamo.reset()
