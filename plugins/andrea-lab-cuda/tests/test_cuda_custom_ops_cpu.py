"""The registration of the kernels as PyTorch operators, checked on the CPU: schema, fake (meta)
implementation, autograd formula and torch.compile, with ``torch.library.opcheck`` (the operators'
CPU implementation is the eager reference of each kernel's contract); that a compiled model with the
cuda backend still runs on the CPU through the fallbacks; and the strict switch ANDREA_REQUIRE_GPU on
this package's GPU tests. (That a compiled graph calls the launchers: test_cuda_backend_cpu.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import andrea_lab.plugin as plugin
from andrea_lab.plugin import Availability
from andrea_lab_cuda import backend, custom_ops

HERE = Path(__file__).resolve().parent


def _leaf(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_()


def _cases(dtype):
    x, d, w, b = (
        _leaf(3, 5, 16, dtype=dtype),
        _leaf(3, 5, 16, dtype=dtype, seed=1),
        _leaf(16, dtype=dtype, seed=2),
        _leaf(16, dtype=dtype, seed=3),
    )
    gate, up = _leaf(4, 2 * 24, dtype=dtype, seed=4).chunk(2, -1)  # row-strided views, as the model passes them
    stats = (torch.randn(15), torch.rand(15) + 0.5)
    return [
        (custom_ops.gelu_tanh, (x,)),
        (custom_ops.gelu_tanh_backward, (x.detach(), d.detach())),
        (custom_ops.relu, (x,)),
        (custom_ops.relu_backward, (x.detach(), d.detach())),
        (custom_ops.swiglu, (gate, up)),
        (custom_ops.swiglu_backward, (torch.randn(4, 24).to(dtype), gate.detach(), up.detach())),
        (custom_ops.layer_norm, (x, w, b, 1e-5)),
        (custom_ops.layer_norm, (x, None, None, 1e-5)),
        (custom_ops.layer_norm, (x, w, None, 1e-5)),
        (custom_ops.add_layer_norm, (x, d, w, b, 1e-5)),
        (custom_ops.layer_norm_backward, (d.detach(), x.detach(), *stats, w.detach(), None, True, False)),
        (custom_ops.layer_norm_backward, (d.detach(), x.detach(), *stats, None, x.detach(), False, False)),
        (custom_ops.rms_norm, (x, w, 1e-5)),
        (custom_ops.rms_norm, (x, None, 1e-5)),
        (custom_ops.rms_norm_backward, (d.detach(), x.detach(), stats[1], w.detach(), True)),
        (custom_ops.rms_norm_backward, (d.detach(), x.detach(), stats[1], None, False)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_operator_passes_opcheck(dtype):
    """Schema, fake implementation (shapes, dtypes, strides), autograd registration, and AOT dispatch
    (what torch.compile does) against the real implementation: every operator in fp32, the ones whose
    outputs' dtypes differ from their inputs' (fp32 statistics) or that read strided views in bf16."""
    for op, args in _cases(dtype):
        if dtype != torch.float32 and op not in (
            custom_ops.layer_norm,
            custom_ops.add_layer_norm,
            custom_ops.swiglu,
            custom_ops.rms_norm,
        ):
            continue
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def test_the_operators_follow_the_eager_reference_and_its_gradients():
    x, w, b = _leaf(6, 32), _leaf(32, seed=1), _leaf(32, seed=2)
    h = _leaf(6, 64, seed=3)
    ours = (
        custom_ops.layer_norm(x, w, b, 1e-5)[0].sum()
        + custom_ops.gelu_tanh(x).sum()
        + (custom_ops.rms_norm(x, w, 1e-5)[0] * b).sum()
        + custom_ops.swiglu(*h.chunk(2, -1)).sum()
        + custom_ops.relu(x).square().sum()
    )
    grads = torch.autograd.grad(ours, (x, w, b, h))
    refs = [t.detach().clone().requires_grad_() for t in (x, w, b, h)]
    rx, rw, rb, rh = refs
    theirs = (
        F.layer_norm(rx, (32,), rw, rb, 1e-5).sum()
        + F.gelu(rx, approximate="tanh").sum()
        + (F.rms_norm(rx, (32,), rw, 1e-5) * rb).sum()
        + (F.silu(rh[:, :32]) * rh[:, 32:]).sum()
        + F.relu(rx).square().sum()
    )
    torch.testing.assert_close(ours, theirs)
    for got, want in zip(grads, torch.autograd.grad(theirs, refs)):
        torch.testing.assert_close(got, want)


def test_a_compiled_cuda_model_runs_on_the_cpu_through_the_fallbacks(fresh_availability, monkeypatch):
    monkeypatch.setattr(backend, "availability", lambda: Availability(True, "pretend"))
    losses = {}
    for name in ("cuda", "torch"):
        torch.manual_seed(0)
        model = plugin.Andrea(plugin.preset("andrea-micro", kernel_backend=name, activation="swiglu"))
        idx = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(1))
        compiled = torch.compile(model, backend="aot_eager")
        _, loss = compiled(idx, idx)
        loss.backward()
        losses[name] = (loss.item(), model.token_embed.weight.grad.norm().item())
    assert losses["cuda"] == pytest.approx(losses["torch"], rel=1e-6)


def test_require_gpu_makes_this_packages_gpu_tests_fail_instead_of_skip():
    """ANDREA_REQUIRE_GPU=1: the one switch. Without a GPU every selected gpu test fails (not skips)."""
    if torch.cuda.is_available():
        pytest.skip("checks the behaviour on a machine without a GPU")
    env = {**os.environ, "ANDREA_REQUIRE_GPU": "1"}
    tests = [
        f"{HERE / 'test_cuda_gpu.py'}::{name}"
        for name in ("test_non_contiguous_input", "test_layer_norm_backward_is_deterministic")
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE.parents[2],
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "ANDREA_REQUIRE_GPU=1, but this gpu test was skipped: no CUDA device" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert "2 errors" in last and "skipped" not in last and "passed" not in last, last
