"""The optimizer and schedule (andrea_lab/fit/optim.py), usable without the LightningModule."""

import subprocess
import sys

import pytest
import torch

from andrea_lab.fit.optim import adamw_with_schedule, tag_weight_decay, warmup_cosine


def test_warmup_then_cosine():
    assert warmup_cosine(0, 10, 110, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 110, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(60, 10, 110, 0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    assert warmup_cosine(110, 10, 110, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(500, 10, 110, 0.1) == pytest.approx(0.1)


def test_zero_warmup_starts_at_the_peak():
    assert warmup_cosine(0, 0, 100, 0.0) == pytest.approx(1.0)
    assert warmup_cosine(50, 0, 100, 0.0) == pytest.approx(0.5)


def test_any_model_gets_decay_on_its_matrices_and_the_per_step_schedule():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    tag_weight_decay(model)
    model[0].weight.data = model[0].weight.data.flatten()  # what FSDP does: the tag, not the shape, decides
    optimizer, scheduler = adamw_with_schedule(model, 1e-3, (0.9, 0.95), 1e-8, 0.1, 2, 10, 0.1, fused=False)
    decayed, plain = optimizer.param_groups
    assert [p.numel() for p in decayed["params"]] == [16] and decayed["weight_decay"] == 0.1
    assert len(plain["params"]) == 3 and plain["weight_decay"] == 0.0
    assert scheduler.get_last_lr()[0] == pytest.approx(1e-3 * 0.5)  # step 0 of a 2-step warmup


def test_the_optimizer_module_imports_without_lightning():
    code = "import sys, andrea_lab.fit.optim; print('lightning' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
