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
