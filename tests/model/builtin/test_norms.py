"""The built-in norms: layernorm (today's module, bit for bit) and rmsnorm, each through the backend's op."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from andrea_lab import Andrea, preset
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.norms import LayerNorm, RMSNorm
from andrea_lab.model.contracts import LayerNorm as BackendLayerNorm
from andrea_lab.model.contracts import Norm
from andrea_lab.plugin.testing import check_norm


def test_layernorm_is_the_backend_layernorm_with_nn_layernorm_parameters():
    norm = LayerNorm(16, TorchBackend(), eps=1e-6, bias=True)
    assert isinstance(norm, BackendLayerNorm) and isinstance(norm, nn.LayerNorm) and isinstance(norm, Norm)
    assert list(norm.state_dict()) == ["weight", "bias"] and norm.eps == 1e-6
    x = torch.randn(3, 5, 16)
    assert torch.equal(norm(x), F.layer_norm(x, (16,), norm.weight, norm.bias, 1e-6))
    assert LayerNorm(16, TorchBackend(), bias=False).bias is None


def test_rmsnorm_is_the_formula_with_a_gain_and_no_bias():
    norm = RMSNorm(16, TorchBackend(), eps=1e-5, bias=True).double()
    with torch.no_grad():
        norm.weight.normal_()
    assert list(norm.state_dict()) == ["weight"], "a gain only, whatever the config's bias"
    x = 3 * torch.randn(3, 5, 16, dtype=torch.float64) + 2
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)


@pytest.mark.parametrize(
    "cls, ops", [(LayerNorm, ["layer_norm", "add_layer_norm"]), (RMSNorm, ["rms_norm", "rms_norm"])]
)
def test_each_norm_computes_through_its_backend_op(cls, ops, recording_backend):
    norm = cls(8, recording_backend)
    x = torch.randn(2, 8)
    summed, normed = norm.add_and_norm(norm(x), x)
    assert recording_backend.calls == ops
    torch.testing.assert_close(normed, norm(summed))


def test_rmsnorm_falls_back_to_the_reference_on_a_backend_without_rms_norm():
    class OldBackend:  # written before rms_norm existed, not subclassing KernelBackend
        pass

    x = torch.randn(2, 8)
    torch.testing.assert_close(RMSNorm(8, OldBackend())(x), F.rms_norm(x, (8,), torch.ones(8), 1e-5))


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_builtin_norms_keep_the_contract(name):
    check_norm(name)


def test_rmsnorm_reaches_every_norm_of_the_model():
    model = Andrea(preset("andrea-micro", norm="rmsnorm", qk_norm=True, norm_placement="peri"))
    norms = [m for m in model.modules() if isinstance(m, Norm)]
    # per block: 2 sublayers x 2 (peri) + q and k norms; plus the final norm
    assert len(norms) == model.config.n_layer * 6 + 1 and all(isinstance(m, RMSNorm) for m in norms)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
