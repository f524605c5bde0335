"""squared_relu: registered under its name, numerically relu(x)², computed through the backend."""

import torch

from andrea_lab.plugin import KernelBackend, check_activation, list_plugins, resolve
from andrea_lab_example.activations import SquaredReLU


def target(cls: type) -> str:
    # Compared by import path, not identity: a test session may re-import the package from another
    # install (the suite installs it into a temporary directory too).
    return f"{cls.__module__}:{cls.__qualname__}"


def test_registered_and_selectable_by_name():
    assert target(resolve("activation", "squared_relu")) == target(SquaredReLU)
    assert target(resolve("activation", "andrea-lab-example:squared_relu")) == target(SquaredReLU)
    (info,) = [p for p in list_plugins("activation") if p.name == "squared_relu"]
    assert (info.distribution, info.error) == ("andrea-lab-example", None)
    assert "relu" in info.description.lower()


def test_matches_reference_values_and_gradient():
    x = torch.randn(4, 32, dtype=torch.float64, requires_grad=True)
    y = SquaredReLU(KernelBackend())(x)
    torch.testing.assert_close(y, torch.relu(x) ** 2)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.relu(x.detach()))


def test_relu_is_computed_by_the_backend(recording_backend):
    # recording_backend: a fixture of andrea_lab.plugin.testing's pytest plugin (installed with andrea-lab).
    SquaredReLU(recording_backend)(torch.randn(2, 3, 8))
    assert recording_backend.calls == ["relu"]


def test_keeps_the_activation_contract_alone_and_in_models():
    check_activation(SquaredReLU)  # the class, alone and in micro models
    check_activation("andrea-lab-example:squared_relu")  # the registered name, as a YAML selects it


def test_elementwise_with_ratio_four():
    assert SquaredReLU.gated is False and SquaredReLU.default_mlp_ratio == 4.0
