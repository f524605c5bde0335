"""Property tests: every valid config builds a model whose forward works; every invalid one is
refused with a ConfigError message — never a crash inside torch."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from andrea_lab import Andrea, AndreaConfig
from andrea_lab.model.config import ConfigError

valid_configs = st.builds(
    lambda heads, head_size, **rest: AndreaConfig(n_head=heads, d_model=heads * head_size, **rest),
    heads=st.integers(1, 4),
    head_size=st.integers(1, 12),
    vocab_size=st.integers(2, 300),
    block_size=st.integers(1, 32),
    n_layer=st.integers(1, 3),
    mlp_ratio=st.one_of(st.none(), st.floats(0.1, 6.0)),
    norm_placement=st.sampled_from(["pre", "post"]),
    activation=st.sampled_from(["gelu", "relu", "swiglu"]),
    bias=st.booleans(),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=valid_configs, batch=st.integers(1, 3), data=st.data())
def test_every_valid_config_builds_a_working_model(config, batch, data):
    length = data.draw(st.integers(1, config.block_size))
    model = Andrea(config)
    idx = torch.randint(0, config.vocab_size, (batch, length))
    logits, loss = model(idx, idx)
    assert logits.shape == (batch, length, config.vocab_size)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    loss.backward()


field_values = st.one_of(st.integers(-5, 0), st.floats(allow_nan=True), st.text(max_size=3), st.none())


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(["vocab_size", "block_size", "d_model", "n_layer", "n_head"]), value=field_values)
def test_invalid_sizes_are_refused_with_a_message(field, value):
    with pytest.raises(ConfigError) as info:
        AndreaConfig(**{field: value})
    assert field in str(info.value)


@settings(max_examples=40, deadline=None)
@given(d_model=st.integers(1, 512), n_head=st.integers(1, 64))
def test_head_divisibility_is_checked_before_torch_sees_it(d_model, n_head):
    if d_model % n_head:
        with pytest.raises(ConfigError, match="must be divisible by n_head"):
            AndreaConfig(d_model=d_model, n_head=n_head)
    else:
        assert AndreaConfig(d_model=d_model, n_head=n_head).head_size == d_model // n_head
