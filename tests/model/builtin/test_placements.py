import pytest
import torch
from torch import nn

from andrea_lab import Andrea, preset
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.norms import RMSNorm
from andrea_lab.model.builtin.placements import DeepNorm, PeriNorm, PostNorm, PreNorm, ReorderedNorm
from andrea_lab.plugin.testing import check_placement


class Recorder(nn.Module):
    """A sublayer that remembers its input and adds a constant, so the wiring can be observed."""

    def forward(self, x):
        self.seen = x.detach().clone()
        return torch.full_like(x, 3.0)


def per_token_stats(x):
    return x.mean(-1), x.var(-1, unbiased=False)


def test_pre_norm_normalises_the_sublayer_input_and_adds_to_the_raw_stream():
    recorder = Recorder()
    block = PreNorm(16, recorder, TorchBackend())
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    mean, var = per_token_stats(recorder.seen)
    torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-5, rtol=0)
    torch.testing.assert_close(var, torch.ones_like(var), atol=1e-3, rtol=0)
    torch.testing.assert_close(out, x + 3.0)  # the stream itself is not normalised
    assert PreNorm.final_norm


def test_post_norm_feeds_the_raw_stream_and_normalises_after_the_add():
    recorder = Recorder()
    block = PostNorm(16, recorder, TorchBackend())
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    torch.testing.assert_close(recorder.seen, x)  # the sublayer reads the raw stream
    expected = nn.functional.layer_norm(x + 3.0, (16,))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert not PostNorm.final_norm


# ---------------------------------------------------------------- peri, reordered, deepnorm


def affine_norms(block):
    """Give every norm of a placement random affine parameters, so that two norms cannot be swapped unnoticed."""
    with torch.no_grad():
        for p in block.parameters():
            p.normal_()
    return block


def test_peri_norms_the_sublayer_input_and_its_output_before_the_add():
    sublayer = nn.Linear(16, 16).double()
    block = affine_norms(PeriNorm(16, sublayer, TorchBackend())).double()
    x = torch.randn(2, 4, 16, dtype=torch.float64) * 5 + 2
    ln = lambda norm, v: nn.functional.layer_norm(v, (16,), norm.weight, norm.bias, 1e-5)  # noqa: E731
    torch.testing.assert_close(block(x), x + ln(block.norm_out, sublayer(ln(block.norm_in, x))))
    assert PeriNorm.final_norm


def test_reordered_norms_only_the_sublayer_output():
    recorder = Recorder()
    block = affine_norms(ReorderedNorm(16, recorder, TorchBackend()))
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    torch.testing.assert_close(recorder.seen, x)  # the sublayer reads the raw stream
    expected = x + nn.functional.layer_norm(torch.full_like(x, 3.0), (16,), block.norm.weight, block.norm.bias)
    torch.testing.assert_close(out, expected)
    assert ReorderedNorm.final_norm


def test_deepnorm_is_post_norm_with_the_residual_scaled_by_alpha():
    recorder = Recorder()
    block = DeepNorm(16, recorder, TorchBackend(), n_layer=6)
    assert block.alpha == pytest.approx(12**0.25) and block.beta == pytest.approx(48**-0.25)
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    torch.testing.assert_close(recorder.seen, x)
    torch.testing.assert_close(out, nn.functional.layer_norm(12**0.25 * x + 3.0, (16,)), atol=1e-5, rtol=1e-5)
    assert not DeepNorm.final_norm
    with pytest.raises(ValueError, match="n_layer"):
        DeepNorm(16, recorder, TorchBackend())


def test_deepnorm_initialise_scales_the_value_path_by_beta_and_leaves_q_k_alone():
    torch.manual_seed(0)
    config = preset("andrea-tiny", norm_placement="deepnorm", n_layer=8)
    model = Andrea(config)
    beta, C = (8 * 8) ** -0.25, config.d_model
    attention, mlp = model.blocks[0].inner
    for weight in (attention.qkv.weight[2 * C :], attention.proj.weight, mlp.fc.weight, mlp.proj.weight):
        assert weight.std().item() == pytest.approx(0.02 * beta, rel=0.05)
    assert attention.qkv.weight[: 2 * C].std().item() == pytest.approx(0.02, rel=0.05), "q and k keep GPT-2's init"


@pytest.mark.parametrize("name", ["peri", "reordered", "deepnorm"])
def test_modern_placements_keep_the_contract_and_take_the_norm_kind(name):
    check_placement(name)
    model = Andrea(preset("andrea-micro", norm_placement=name, norm="rmsnorm"))
    wiring_norms = [m for m in model.blocks[0].attn.modules() if isinstance(m, RMSNorm)]
    assert len(wiring_norms) == (2 if name == "peri" else 1)
