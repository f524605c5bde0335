"""Non-finite steps are caught without a per-step host sync, and their updates are never applied."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from andrea_testing import NaNAtStep, tiny_trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from andrea_lab.data import AndreaDataModule
from andrea_lab.errors import DivergenceError
from andrea_lab.fit.nonfinite import NonFiniteTally, takes_found_inf
from andrea_lab.fit.optim import fused_adamw

NAN = float("nan")


def test_tally_counts_bad_steps_and_keeps_the_first():
    tally = NonFiniteTally()
    for step, loss, norm in [(0, 2.0, 1.0), (1, NAN, 3.0), (2, 2.5, math.inf), (3, 2.0, 1.0)]:
        loss, norm = torch.tensor(loss), torch.tensor(norm)
        tally.record(~(torch.isfinite(loss) & torch.isfinite(norm)), step, loss, norm)
    found = tally.collect()
    assert (found.count, found.first_step, found.grad_norm) == (2, 1, 3.0) and math.isnan(found.loss)
    assert tally.collect() is None, "collect resets the tally"


def test_tally_of_finite_steps_reports_nothing():
    tally = NonFiniteTally()
    assert tally.collect() is None
    tally.record(torch.tensor(False), 0, torch.tensor(1.0), torch.tensor(1.0))
    assert tally.collect() is None


def test_fused_adamw_takes_the_skip_flag_and_skips_on_the_device():
    weight = torch.nn.Parameter(torch.ones(8))
    optimizer = fused_adamw([{"params": [weight], "weight_decay": 0.1}], lr=0.1)
    assert takes_found_inf(optimizer)
    assert not takes_found_inf(torch.optim.AdamW([weight], foreach=True))
    weight.grad = torch.full((8,), NAN)
    optimizer.found_inf = torch.ones(())
    optimizer.step()
    state = optimizer.state[weight]
    assert torch.equal(weight.detach(), torch.ones(8)), "the flagged update was applied"
    assert torch.isfinite(state["exp_avg"]).all() and int(state["step"]) == 0
    weight.grad, optimizer.found_inf = torch.ones(8), torch.zeros(())
    optimizer.step()
    assert not torch.equal(weight.detach(), torch.ones(8)) and int(optimizer.state[weight]["step"]) == 1


def run(tmp_path, corpus, module, max_steps=12, log_every=5):
    L.seed_everything(0, verbose=False)
    data = AndreaDataModule(
        corpus=str(corpus), tokenizer="byte", vocab_size=257, block_size=32, batch_size=4, max_val_batches=1
    )
    trainer = tiny_trainer(
        tmp_path,
        max_steps=max_steps,
        log_every_n_steps=log_every,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        val_check_interval=max_steps,
        check_val_every_n_epoch=None,
        gradient_clip_val=1.0,
    )
    trainer.fit(module, datamodule=data)
    return trainer


def all_finite(module):
    return all(torch.isfinite(p).all() for p in module.parameters())


def test_stop_raises_at_the_next_check_naming_the_first_bad_step_with_weights_intact(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(3,))
    with pytest.raises(DivergenceError, match=r"training diverged at step 3: loss [0-9.]+, gradient norm nan") as error:
        run(tmp_path, text_corpus, module, log_every=5)
    assert "Non-finite updates are never applied" in str(error.value)
    assert module.steps_seen[-1] == 4, "the host reads the tally when the logger writes (step 5), not every step"
    assert all_finite(module), "the NaN update of step 3 reached the weights"


def test_skip_policy_counts_deferred_steps_and_finishes(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(3, 6), on_nonfinite="skip", max_skipped_steps=2)
    with pytest.warns(RuntimeWarning, match=r"at step 3 .*update skipped \(1 of at most 2\)"):
        trainer = run(tmp_path, text_corpus, module, log_every=5)
    assert trainer.global_step == 12 and module.nonfinite.skipped_steps == 2 and all_finite(module)


def test_a_skip_in_the_last_window_is_settled_at_the_end_of_training(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(10,), on_nonfinite="skip")
    with pytest.warns(RuntimeWarning, match=r"at step 10 .*update skipped \(1 of"):
        trainer = run(tmp_path, text_corpus, module, max_steps=12, log_every=5)  # checks at 5, 10, then the end
    assert module.nonfinite.skipped_steps == 1 and all_finite(module)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/skipped_steps")] == [(12, 1.0)]


def test_skip_policy_stops_past_the_limit_even_within_one_check_window(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(1, 2, 3), on_nonfinite="skip", max_skipped_steps=2)
    with pytest.raises(DivergenceError, match=r"at step 1: .*more than max_skipped_steps=2"):
        run(tmp_path, text_corpus, module, log_every=5)
    assert all_finite(module)


class UnfusedNaNAtStep(NaNAtStep):
    use_fused_adamw = False  # as on a device without the fused kernel


def test_an_optimizer_without_the_flag_is_checked_every_step(tmp_path, text_corpus):
    module = UnfusedNaNAtStep(bad_steps=(3,))
    with pytest.raises(DivergenceError, match="at step 3"):
        run(tmp_path, text_corpus, module, log_every=5)
    assert module.steps_seen[-1] == 3 and all_finite(module)
    skipping = UnfusedNaNAtStep(bad_steps=(3,), on_nonfinite="skip")
    with pytest.warns(RuntimeWarning, match="update skipped"):
        run(tmp_path / "skip", text_corpus, skipping, log_every=5)
    assert skipping.nonfinite.skipped_steps == 1 and all_finite(skipping)


def test_per_step_scalars_are_logged_on_the_steps_the_logger_writes(tmp_path, text_corpus):
    trainer = run(tmp_path, text_corpus, NaNAtStep(bad_steps=()), max_steps=12, log_every=5)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    steps = {
        tag: [e.step for e in events.Scalars(tag)]
        for tag in ("train/loss", "train/lr", "train/grad_norm", "train/tokens")
    }
    assert steps["train/loss"] == [4, 9], steps
    assert steps["train/lr"] == steps["train/grad_norm"] == steps["train/tokens"] == steps["train/loss"], steps
    tokens = dict((e.step, e.value) for e in events.Scalars("train/tokens"))
    assert tokens[9] == 10 * 4 * 32


def test_callbacks_find_the_guard_only_where_a_module_publishes_one():
    from andrea_lab.fit.module import AndreaLM
    from andrea_lab.fit.nonfinite import NonFiniteGuard, guard_of
    from andrea_lab.model.config import preset

    module = AndreaLM(config=preset("andrea-micro"), on_nonfinite="skip")
    assert guard_of(module) is module.nonfinite and guard_of(module).skips
    assert guard_of(torch.nn.Linear(2, 2)) is None
    impostor = torch.nn.Linear(2, 2)
    impostor.nonfinite = "skip"  # an attribute that happens to have the name is not a guard
    assert guard_of(impostor) is None
    assert not NonFiniteGuard("stop", 3).skips


def test_the_guard_skips_up_to_its_limit_then_raises_naming_the_checkpoint():
    from andrea_lab.fit.nonfinite import NonFiniteGuard

    guard = NonFiniteGuard("skip", 1)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert guard.observe(optimizer, 3, torch.tensor(NAN), torch.tensor(1.0))  # SGD: settle now
    with pytest.warns(RuntimeWarning, match="at step 3 .*update skipped \\(1 of at most 1\\)"):
        assert guard.settle("none") == 1
    assert guard.settle("none") == 0
    guard.observe(optimizer, 5, torch.tensor(1.0), torch.tensor(float("inf")))
    with pytest.raises(DivergenceError, match="at step 5: .*max_skipped_steps=1.*kept: ckpt/last.ckpt"):
        guard.settle("ckpt/last.ckpt")


def fit_with_checkpoints(tmp_path, corpus, module, weights_only, max_steps=12):
    """A fit that saves a checkpoint every 5 steps while the tally is read only at the end (log every 50
    steps): whatever is settled before step 10 is settled by the checkpoint itself."""
    L.seed_everything(0, verbose=False)
    data = AndreaDataModule(
        corpus=str(corpus), tokenizer="byte", vocab_size=257, block_size=32, batch_size=4, max_val_batches=1
    )
    checkpoints = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=-1, save_weights_only=weights_only
    )
    trainer = tiny_trainer(
        tmp_path,
        max_steps=max_steps,
        log_every_n_steps=50,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_checkpointing=True,
        callbacks=[checkpoints],
    )
    trainer.fit(module, datamodule=data)
    return list((tmp_path / "ckpt").glob("*.ckpt"))


@pytest.mark.parametrize("weights_only", [False, True], ids=["full", "weights-only"])
def test_stop_raises_before_the_checkpoint_of_a_diverged_run_is_written(tmp_path, text_corpus, weights_only):
    # Lightning skips callbacks' on_save_checkpoint for a weights-only checkpoint: the module's hook settles.
    with pytest.raises(DivergenceError, match=r"at step 3: .*last good checkpoint is kept: none written yet"):
        fit_with_checkpoints(tmp_path, text_corpus, NaNAtStep(bad_steps=(3,)), weights_only)
    assert list((tmp_path / "ckpt").glob("*.ckpt")) == [], "a checkpoint of the diverged run was written"


@pytest.mark.parametrize("weights_only", [False, True], ids=["full", "weights-only"])
def test_a_checkpoint_counts_the_steps_skipped_before_it(tmp_path, text_corpus, weights_only):
    module = NaNAtStep(bad_steps=(3,), on_nonfinite="skip")
    with pytest.warns(RuntimeWarning, match="at step 3 .*update skipped"):
        paths = fit_with_checkpoints(tmp_path, text_corpus, module, weights_only)
    saved = [torch.load(path, weights_only=False) for path in paths]
    assert sorted((c["global_step"], c["skipped_steps"]) for c in saved) == [(5, 1), (10, 1)]
    assert all("rng_states" in c for c in saved) and module.nonfinite.skipped_steps == 1


@pytest.mark.parametrize("clip", [None, 1.0], ids=["fused", "clipped-unfused"])
def test_under_a_grad_scaler_an_overflowing_step_is_the_scalers_not_a_divergence(tmp_path, text_corpus, clip):
    # fp16 on the CPU, as on CUDA: the GradScaler skips the step and lowers its scale; "stop" must not raise.
    from lightning.pytorch.plugins.precision import MixedPrecision

    L.seed_everything(0, verbose=False)
    module = NaNAtStep(bad_steps=(3,))
    data = AndreaDataModule(
        corpus=str(text_corpus), tokenizer="byte", vocab_size=257, block_size=32, batch_size=4, max_val_batches=1
    )
    trainer = tiny_trainer(
        tmp_path,
        max_steps=6,
        log_every_n_steps=2,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        gradient_clip_val=clip,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))],
    )
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 6 and module.nonfinite.skipped_steps == 0 and all_finite(module)
    assert trainer.precision_plugin.scaler.get_scale() < 65536.0, "the scaler saw the overflow"
    # With clipping the scaler must unscale first, which a fused AdamW does not allow: the foreach one.
    assert bool(trainer.optimizers[0].defaults.get("fused")) == (clip is None)


def first_logged_grad_norms(tmp_path, corpus, precision_plugins):
    """The gradient norms the guard measured in the first two optimizer steps of a micro fit."""
    seen = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(float(pl_module.nonfinite.last_grad_norm))

    L.seed_everything(0, verbose=False)
    data = AndreaDataModule(
        corpus=str(corpus), tokenizer="byte", vocab_size=257, block_size=32, batch_size=4, max_val_batches=1
    )
    trainer = tiny_trainer(
        tmp_path,
        max_steps=2,
        log_every_n_steps=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[Record()],
        plugins=precision_plugins,
    )
    trainer.fit(NaNAtStep(bad_steps=()), datamodule=data)
    return seen


def test_under_a_grad_scaler_the_fused_adamws_gradient_norm_is_logged_unscaled(tmp_path, text_corpus):
    # The fused AdamW unscales inside its step, after the guard has measured: the guard divides the scale out.
    from lightning.pytorch.plugins.precision import MixedPrecision

    fp32 = first_logged_grad_norms(tmp_path / "fp32", text_corpus, [])
    fp16 = first_logged_grad_norms(
        tmp_path / "fp16", text_corpus, [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]
    )
    assert len(fp32) == len(fp16) == 2
    # The same init and batch in fp16 autocast: the same norm up to fp16 rounding (the bug was a factor 65536).
    assert fp16[0] == pytest.approx(fp32[0], rel=0.05), (fp16, fp32)
