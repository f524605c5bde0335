"""andrea_lab/fit/z_loss.py and AndreaLM's use of it: the optimised loss is CE + z_loss·mean(log² Z), the logged
``train/loss`` stays the cross-entropy, ``train/z_loss`` is the added term."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from andrea_testing import tiny_trainer
from torch.utils.data import DataLoader, TensorDataset

from andrea_lab.fit.module import AndreaLM
from andrea_lab.fit.z_loss import cross_entropy_and_z_loss, log_z
from andrea_lab.model.config import preset
from andrea_lab.runs import tags


def test_cross_entropy_and_z_loss_share_one_log_normaliser():
    logits = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 3.0, -2.0]]], dtype=torch.bfloat16)
    targets = torch.tensor([[2, 0]])
    assert log_z(logits).dtype == torch.float32
    by_hand = [math.log(3.0), math.log(math.exp(1.0) + math.exp(3.0) + math.exp(-2.0))]
    torch.testing.assert_close(log_z(logits)[0], torch.tensor(by_hand))
    ce, penalty = cross_entropy_and_z_loss(logits, targets, 0.5)
    assert penalty.item() == pytest.approx(0.5 * (by_hand[0] ** 2 + by_hand[1] ** 2) / 2, rel=1e-6)
    assert ce.item() == pytest.approx(F.cross_entropy(logits.float().view(-1, 3), targets.view(-1)).item(), rel=1e-6)


class Expected(L.Callback):
    """Before each step, the batch's cross-entropy and z-loss term by hand; then what AndreaLM optimised."""

    def __init__(self):
        self.rows = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        with torch.no_grad():
            logits, loss = pl_module.model(*batch)
        self.rows.append([loss.item(), pl_module.hparams.z_loss * log_z(logits).pow(2).mean().item()])

    def on_before_backward(self, trainer, pl_module, loss):
        self.rows[-1].append(loss.item())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        metrics = trainer.callback_metrics
        self.rows[-1] += [metrics[tags.TRAIN_LOSS].item(), metrics[tags.TRAIN_Z_LOSS].item()]


def test_the_module_optimises_cross_entropy_plus_z_loss_and_logs_both_apart():
    torch.manual_seed(0)
    lm = AndreaLM(config=preset("andrea-micro", block_size=16), z_loss=0.5, warmup_steps=0)
    data = torch.randint(0, 257, (4, 17))
    loader = DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=2)
    expected = Expected()
    tiny_trainer(max_steps=2, log_every_n_steps=1, callbacks=[expected], limit_val_batches=0).fit(lm, loader)
    for ce, penalty, optimised, logged_loss, logged_z in expected.rows:
        assert penalty > 1.0  # log Z ≈ ln 257 at init: the term is far from negligible at 0.5
        assert optimised == pytest.approx(ce + penalty, rel=1e-5)
        assert logged_loss == pytest.approx(ce, rel=1e-5) and logged_z == pytest.approx(penalty, rel=1e-5)


def test_training_objective_is_the_models_own_loss_without_a_z_loss_and_the_sum_with_one():
    from andrea_lab.fit.z_loss import training_objective
    from andrea_lab.model.transformer import Andrea

    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", block_size=16))
    x, y = torch.randint(0, 257, (2, 16)), torch.randint(0, 257, (2, 16))
    objective, loss, penalty = training_objective(model, x, y, 0.0)
    assert penalty is None and objective is loss, "no z-loss: the model's fused cross-entropy, untouched"
    assert torch.equal(loss, model(x, y)[1])
    objective, loss, penalty = training_objective(model, x, y, 0.5)
    ce, expected_penalty = cross_entropy_and_z_loss(model(x)[0], y, 0.5)
    assert torch.equal(loss, ce) and torch.equal(penalty, expected_penalty)
    assert torch.equal(objective, ce + expected_penalty)
