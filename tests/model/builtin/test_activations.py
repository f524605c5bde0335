import math

import pytest
import torch

from andrea_lab import Andrea, preset
from andrea_lab.model.builtin.activations import GELU, ReLU, SwiGLU
from andrea_lab.model.builtin.backends import TorchBackend


def gelu_tanh_formula(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def test_gelu_is_the_tanh_formula():
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    torch.testing.assert_close(GELU(TorchBackend())(x), gelu_tanh_formula(x), rtol=0, atol=1e-12)


def test_gelu_of_zero_is_exactly_zero_and_tails_behave():
    gelu = GELU(TorchBackend())
    assert gelu(torch.tensor([0.0])).item() == 0.0
    assert gelu(torch.tensor([10.0])).item() == pytest.approx(10.0)
    assert gelu(torch.tensor([-10.0])).item() == pytest.approx(0.0, abs=1e-6)
    assert -0.2 < gelu(torch.tensor([-0.5])).item() < 0  # small negatives leak a little


def test_gelu_differs_from_exact_erf_gelu():
    x = torch.tensor([1.5], dtype=torch.float64)
    assert GELU(TorchBackend())(x) != torch.nn.functional.gelu(x)


def test_relu():
    x = torch.tensor([-1.0, 0.0, 2.0])
    assert ReLU(TorchBackend())(x).tolist() == [0.0, 0.0, 2.0]


def test_swiglu_halves_the_width_and_gates():
    h = torch.randn(2, 5, 2 * 7)
    out = SwiGLU(TorchBackend())(h)
    assert out.shape == (2, 5, 7)
    gate, up = h[..., :7], h[..., 7:]
    torch.testing.assert_close(out, torch.nn.functional.silu(gate) * up)


def test_swiglu_mlp_shapes_and_parameter_parity_with_gelu_4x():
    with torch.device("meta"):
        gelu = Andrea(preset("andrea-120m")).blocks[0].mlp.sublayer
        swiglu = Andrea(preset("andrea-120m", activation="swiglu")).blocks[0].mlp.sublayer
    assert tuple(swiglu.fc.weight.shape) == (2 * 2048, 768)  # [gate | up]
    assert tuple(swiglu.proj.weight.shape) == (768, 2048)
    matrices = lambda m: sum(p.numel() for p in m.parameters() if p.dim() == 2)  # noqa: E731
    assert matrices(swiglu) == matrices(gelu) == 4_718_592
