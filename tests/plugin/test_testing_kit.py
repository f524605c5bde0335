"""andrea_lab.plugin.testing, the kit plugin authors install with andrea-lab: the checks fail the plugins they
should (and pass the built-ins), the recording backend, and the pytest plugin's gpu marker."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from andrea_lab.model.builtin.activations import GELU, SwiGLU
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.norms import RMSNorm
from andrea_lab.model.builtin.placements import PostNorm, PreNorm
from andrea_lab.model.contracts import Activation, Availability, KernelBackend, Norm, NormPlacement
from andrea_lab.plugin import Optimizer, Option, Schedule
from andrea_lab.plugin.testing import (
    RecordingBackend,
    check_activation,
    check_backend,
    check_norm,
    check_optimizer,
    check_placement,
    check_schedule,
)

pytest_plugins = ["pytester"]


class ForgotGated(Activation):
    def forward(self, h):
        gate, up = h.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up


class Detached(Activation):
    def forward(self, h):
        return torch.relu(h).detach()


class Unregistered(NormPlacement):
    def __init__(self, d_model, sublayer, backend, eps=1e-5, bias=True):
        nn.Module.__init__(self)
        self.hidden = [sublayer]

    def forward(self, x):
        return x + self.hidden[0](x)


class Unavailable(KernelBackend):
    @classmethod
    def availability(cls):
        return Availability(False, "needs an FPGA")


class OffByOne(KernelBackend):
    def relu(self, x):
        return torch.relu(x) + 1e-3


class MeanPool(Norm):
    """Reduces the features instead of normalising them: the wrong shape."""

    def __init__(self, dim, backend, eps=1e-5, bias=True):
        super().__init__()

    def forward(self, x):
        return x.mean(-1, keepdim=True)


class UnusedGain(Norm):
    def __init__(self, dim, backend, eps=1e-5, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.nn.functional.rms_norm(x, x.shape[-1:], None, 1e-5)


class InconsistentAdd(RMSNorm):
    def add_and_norm(self, x, delta):
        return x + delta, self(x)  # forgets the delta


class Truncates(PreNorm):
    def forward(self, x):
        return super().forward(x)[..., : x.shape[-1] // 2]


class DetachedNorm(RMSNorm):
    def forward(self, x):
        return super().forward(x).detach()


@pytest.mark.parametrize(
    "check, plugin",
    [
        (check_activation, GELU),
        (check_activation, "andrea-lab:swiglu"),
        (check_placement, PreNorm),
        (check_placement, "post"),
        (check_backend, TorchBackend),
        (check_norm, RMSNorm),
    ],
)
def test_the_builtins_pass(check, plugin):
    check(plugin)


@pytest.mark.parametrize(
    "check, plugin, message",
    [
        (check_activation, ForgotGated, "declare `gated = True`"),
        (check_activation, Detached, "no gradient reaches the input"),
        (check_placement, Unregistered, "the sublayer is not a submodule"),
        (check_backend, OffByOne, "relu differs from the eager reference by up to 0.001"),
        (
            check_placement,
            Truncates,
            r"forward returned shape \(2, 5, 8\) for a residual stream of shape \(2, 5, 16\); "
            r"a placement must return the stream's shape",
        ),
        (check_norm, MeanPool, r"forward returned shape \(2, 5, 1\) for an input of shape \(2, 5, 16\)"),
        (check_norm, DetachedNorm, "no gradient reaches the input: the output is detached from it"),
        (check_norm, UnusedGain, "parameter weight receives no finite gradient"),
        (check_norm, InconsistentAdd, "add_and_norm's second output differs from norm"),
    ],
)
def test_a_misbehaving_plugin_fails_with_what_was_expected(check, plugin, message):
    with pytest.raises(AssertionError, match=message):
        check(plugin)


class UndeclaredSGD(Optimizer):
    """Takes an option of its own without declaring it: refused by the kit (it runs, unchecked, in a fit)."""

    contract_version = 1
    groups = {"sgd": ("matrix", "embedding", "vector")}

    def __init__(self, lr, betas, eps, weight_decay, momentum=0.9):
        super().__init__(lr, betas, eps, weight_decay)
        self.momentum = momentum

    def build(self, groups, fused=True):
        return torch.optim.SGD(groups["sgd"], lr=self.lr, momentum=self.momentum)


class DeclaredSGD(UndeclaredSGD):
    options = {"momentum": Option(float, 0.0, 1.0, high_open=True)}


class TooWideAdam(UndeclaredSGD):
    """Declares momentum valid up to 1 inclusive, where torch's Adam refuses it as a beta."""

    options = {"momentum": Option(float, 0.0, 1.0)}

    def build(self, groups, fused=True):
        return torch.optim.Adam(groups["sgd"], lr=self.lr, betas=(self.momentum, 0.99))


class BadDefault(UndeclaredSGD):
    options = {"momentum": Option(float, 0.0, 0.5)}


class PeakSchedule(Schedule):
    """1 until ``peak_at``, then 0; declared down to 0 where it divides by it."""

    contract_version = 1
    options = {"peak_at": Option(float, 0.0, 1.0)}

    def __init__(self, warmup_steps, decay_steps, min_lr_ratio, peak_at=0.5):
        super().__init__(warmup_steps, decay_steps, min_lr_ratio)
        self.peak_at = peak_at

    def multiplier(self, step):
        return 1.0 if step / (self.peak_at * self.decay_steps) < 1 else 0.0


def test_an_optimizer_with_declared_options_passes():
    check_optimizer(DeclaredSGD)


@pytest.mark.parametrize(
    "check, plugin, message",
    [
        (check_optimizer, UndeclaredSGD, "its constructor takes momentum but it declares no `options`"),
        (check_optimizer, BadDefault, r"option 'momentum''s default 0.9 is not a finite float in \[0, 0.5\]"),
        (check_optimizer, TooWideAdam, r"with momentum=1.0 \(an end of its declared range\) it does not train"),
        (check_schedule, PeakSchedule, r"with peak_at=0.0 \(an end of its declared range\): ZeroDivisionError"),
    ],
)
def test_a_plugin_is_held_to_its_declared_options(check, plugin, message):
    with pytest.raises(AssertionError, match=message):
        check(plugin)


def test_a_plugin_class_is_also_checked_inside_models_by_its_import_path():
    class WrongWidthInModels(SwiGLU):
        default_mlp_ratio = 0.0001  # fine alone; the model's hidden size rounds up to one multiple

    check_activation(WrongWidthInModels, in_models=False)
    with pytest.raises(AssertionError, match="micro model"):
        check_activation(WrongWidthInModels)  # a local class has no import path the model can select


def test_an_unavailable_backend_skips_the_test_with_its_reason():
    with pytest.raises(pytest.skip.Exception, match="not available here: needs an FPGA"):
        check_backend(Unavailable)


def test_recording_backend_records_the_outermost_ops_in_order(recording_backend):
    PreNorm(8, nn.Identity(), recording_backend)(torch.randn(1, 2, 8))
    PostNorm(8, nn.Identity(), recording_backend)(torch.randn(1, 2, 8))
    SwiGLU(recording_backend)(torch.randn(1, 2, 8))
    assert recording_backend.calls == ["layer_norm", "add_layer_norm", "swiglu"]
    assert isinstance(RecordingBackend(), TorchBackend) and RecordingBackend().calls == []


GPU_TEST = """
import pytest

@pytest.mark.gpu
def test_needs_a_gpu():
    pass

def test_plain():
    pass
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without a GPU")
def test_gpu_marker_is_registered_and_skips_without_cuda(pytester, monkeypatch):
    monkeypatch.delenv("ANDREA_REQUIRE_GPU", raising=False)
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-markers", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*no CUDA device: torch.cuda.is_available() is False*"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without a GPU")
def test_require_gpu_turns_the_skip_into_a_failure(pytester, monkeypatch):
    monkeypatch.setenv("ANDREA_REQUIRE_GPU", "1")
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-markers")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, errors=1)  # an error, since the skip happens at setup
    result.stdout.fnmatch_lines(["ANDREA_REQUIRE_GPU=1, but this gpu test was skipped: no CUDA device*"])
