"""sandwich: x + LN_out(f(LN_in(x))) with backend LayerNorms, and whole models built with it."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from andrea_lab.plugin import Andrea, ConfigError, KernelBackend, LayerNorm, check_placement, preset, resolve
from andrea_lab_example.placements import SandwichNorm


def test_registered_and_keeps_the_final_norm():
    # Compared by import path, not identity: a test session may re-import the package from another install.
    found = resolve("norm_placement", "sandwich")
    assert f"{found.__module__}:{found.__qualname__}" == "andrea_lab_example.placements:SandwichNorm"
    assert SandwichNorm.final_norm is True


def test_matches_the_formula():
    torch.manual_seed(0)
    d = 16
    sublayer = nn.Linear(d, d)
    block = SandwichNorm(d, sublayer, KernelBackend(), eps=1e-5).double()
    with torch.no_grad():  # non-trivial affine parameters, so that in/out cannot be swapped unnoticed
        for p in (block.norm_in.weight, block.norm_in.bias, block.norm_out.weight, block.norm_out.bias):
            p.normal_()
    x = torch.randn(2, 5, d, dtype=torch.float64)
    ln_in = F.layer_norm(x, (d,), block.norm_in.weight, block.norm_in.bias, 1e-5)
    expected = x + F.layer_norm(sublayer(ln_in), (d,), block.norm_out.weight, block.norm_out.bias, 1e-5)
    torch.testing.assert_close(block(x), expected)


def test_both_norms_are_computed_by_the_backend(recording_backend):
    block = SandwichNorm(8, nn.Identity(), recording_backend, eps=1e-6, bias=False)
    assert isinstance(block.norm_in, LayerNorm) and isinstance(block.norm_out, LayerNorm)
    assert block.norm_in.bias is None and block.norm_in.eps == 1e-6
    block(torch.randn(1, 2, 8))
    assert recording_backend.calls == ["layer_norm", "layer_norm"]


def test_keeps_the_placement_contract_alone_and_in_models():
    check_placement(SandwichNorm)
    check_placement("andrea-lab-example:sandwich")


def test_a_model_with_both_example_plugins_trains():
    torch.manual_seed(0)
    config = preset(
        "andrea-micro", norm_placement="andrea-lab-example:sandwich", activation="andrea-lab-example:squared_relu"
    )
    model = Andrea(config)
    # 2 norms per sublayer, 2 sublayers per block, plus the final norm.
    n_norms = sum(isinstance(m, LayerNorm) for m in model.modules())
    assert n_norms == 4 * config.n_layer + 1
    idx = torch.randint(0, config.vocab_size, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_is_the_builtin_peri_with_layernorm_and_loads_its_state_dict():
    torch.manual_seed(0)
    sublayer = nn.Linear(16, 16)
    sandwich = SandwichNorm(16, sublayer, KernelBackend())
    with torch.no_grad():
        for p in sandwich.parameters():
            p.normal_()
    peri = resolve("norm_placement", "andrea-lab:peri")(16, sublayer, KernelBackend())
    peri.load_state_dict(sandwich.state_dict())
    x = torch.randn(2, 5, 16)
    assert torch.equal(peri(x), sandwich(x))


def test_builds_its_layernorms_itself_so_another_norm_is_refused_naming_it():
    with pytest.raises(ConfigError, match="sandwich.*takes no norm= factory.*norm 'rmsnorm'"):
        Andrea(preset("andrea-micro", norm_placement="andrea-lab-example:sandwich", norm="rmsnorm"))
