"""dyt: γ·tanh(αx) + β as a norm plugin, every norm of a model built with it, and a model that trains."""

import torch
from torch import nn

from andrea_lab.plugin import Andrea, TorchBackend, check_norm, preset, resolve
from andrea_lab_example.norms import DynamicTanh


def test_registered_under_the_norm_kind():
    found = resolve("norm", "andrea-lab-example:dyt")
    assert f"{found.__module__}:{found.__qualname__}" == "andrea_lab_example.norms:DynamicTanh"


def test_matches_the_formula_with_alpha_a_learnable_scalar_at_one_half():
    norm = DynamicTanh(8, TorchBackend())
    assert norm.alpha.shape == () and norm.alpha.item() == 0.5 and norm.alpha.requires_grad
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = 4 * torch.randn(3, 8)
    torch.testing.assert_close(norm(x), norm.weight * torch.tanh(0.5 * x) + norm.bias)
    assert DynamicTanh(8, TorchBackend(), bias=False).bias is None


def test_keeps_the_norm_contract_alone_and_in_models():
    check_norm(DynamicTanh)
    check_norm("andrea-lab-example:dyt")


def test_a_model_with_dyt_everywhere_trains():
    torch.manual_seed(0)
    config = preset("andrea-micro", norm="andrea-lab-example:dyt", qk_norm=True)
    model = Andrea(config)
    # The class the registry resolved, not this module's import: a session may import the package twice.
    dyt = resolve("norm", config.norm)
    norms = [m for m in model.modules() if isinstance(m, dyt)]
    assert len(norms) == 4 * config.n_layer + 1  # 2 placement norms + q and k per block, the final norm
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    idx = torch.randint(0, config.vocab_size, (4, 32))
    targets = torch.roll(idx, -1, 1)
    losses = []
    for _ in range(8):  # plain sign-SGD steps: torch.optim would import inductor again in a nested session
        _, loss = model(idx, targets)
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 1e-2 * p.grad.sign()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.5
    assert norms[0].alpha.item() != 0.5, "α is trained"
