import math

import lightning as L
import pytest
import torch
from andrea_testing import tiny_trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from andrea_lab import preset
from andrea_lab.fit.module import AndreaLM
from andrea_lab.fit.nonfinite import NonFiniteGuard
from andrea_lab.model.components import resolved_mlp_ratio
from andrea_lab.model.config import ConfigError


def test_weight_decay_only_on_matrices():
    module = AndreaLM(config=preset("andrea-micro"), weight_decay=0.1)
    module.trainer = tiny_trainer(max_steps=10)
    optimizer = module.configure_optimizers()["optimizer"]
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in plain["params"])
    assert sum(p.numel() for g in (decayed, plain) for p in g["params"]) == module.model.num_parameters()


def test_weight_decay_groups_survive_flattened_parameters():
    # What FSDP does to parameters before configure_optimizers: every one becomes a 1-D view.
    module = AndreaLM(config=preset("andrea-micro"))
    module.trainer = tiny_trainer(max_steps=10)
    matrices = sum(p.numel() for p in module.model.parameters() if p.dim() >= 2)
    for p in module.model.parameters():
        p.data = p.data.reshape(-1)
    decayed, _ = module.configure_optimizers()["optimizer"].param_groups
    assert sum(p.numel() for p in decayed["params"]) == matrices


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"warmup_steps": -1}, "warmup_steps must be an integer in [0, 1e+12], got -1"),
        ({"min_lr_ratio": 2.0}, "min_lr_ratio must be in [0, 1]"),
        ({"betas": (0.9, 1.5)}, "betas must be two numbers in [0, 1)"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite must be 'stop' or 'skip'"),
        ({"z_loss": float("nan")}, "z_loss must be a finite number >= 0 (0 = off; PaLM uses 1e-4), got nan"),
        ({"z_loss": -1e-4}, "z_loss must be a finite number >= 0"),
    ],
)
def test_invalid_training_arguments(kwargs, fragment):
    with pytest.raises(ConfigError) as info:
        AndreaLM(config=preset("andrea-micro"), **kwargs)
    assert fragment in str(info.value)


def test_checkpoint_of_another_architecture_is_refused_by_name():
    wide = AndreaLM(config=preset("andrea-micro", d_model=96, n_head=2))
    narrow = AndreaLM(config=preset("andrea-micro"))
    checkpoint = {"hyper_parameters": dict(wide.hparams), "state_dict": wide.state_dict()}
    with pytest.raises(ConfigError) as info:
        narrow.on_load_checkpoint(checkpoint)
    assert "d_model: checkpoint 96, config 64" in str(info.value)


def test_a_checkpoint_from_before_the_norm_kind_resumes_and_a_qk_norm_one_is_another_architecture():
    module = AndreaLM(config=preset("andrea-micro"))
    saved = dict(module.hparams)
    old = {key: value for key, value in saved["config"].items() if key not in ("norm", "qk_norm")}
    module.on_load_checkpoint({"hyper_parameters": {**saved, "config": old}})  # missing: at the defaults
    with pytest.raises(ConfigError, match="qk_norm: checkpoint True, config False"):
        module.on_load_checkpoint({"hyper_parameters": {**saved, "config": {**old, "qk_norm": True}}})


def test_another_kernel_backend_may_resume_a_checkpoint():
    module = AndreaLM(config=preset("andrea-micro"))
    saved = dict(module.hparams)
    saved["config"] = {**saved["config"], "dropout": 0.1}
    module.on_load_checkpoint({"hyper_parameters": saved})  # not an architecture field: accepted


def test_a_checkpoint_naming_a_plugin_another_way_resumes():
    # Checkpoints from before the defaults were qualified say "pre"; "andrea-lab:pre" is the same plugin.
    module = AndreaLM(config=preset("andrea-micro"))
    saved = dict(module.hparams)
    saved["config"] = {**saved["config"], "norm_placement": "pre", "activation": "andrea_lab:gelu"}
    module.on_load_checkpoint({"hyper_parameters": saved})
    saved["config"] = {**saved["config"], "activation": "relu"}
    with pytest.raises(ConfigError, match="activation: checkpoint 'relu', config 'andrea-lab:gelu'"):
        module.on_load_checkpoint({"hyper_parameters": saved})


def test_rng_states_round_trip_through_the_checkpoint():
    module = AndreaLM(config=preset("andrea-micro"))
    torch.manual_seed(123)
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    expected = torch.rand(3)
    torch.manual_seed(999)
    module.on_load_checkpoint(checkpoint)
    torch.testing.assert_close(torch.rand(3), expected)


def test_hyperparameters_rebuild_the_same_model():
    module = AndreaLM(config=preset("andrea-micro", activation="swiglu"), lr=1e-3)
    rebuilt = AndreaLM(**module.hparams)
    assert rebuilt.config == module.config and rebuilt.hparams.lr == 1e-3
    assert math.isclose(resolved_mlp_ratio(rebuilt.config), 8 / 3)


def test_compile_keeps_checkpoint_keys_and_results():
    torch.manual_seed(0)
    plain = AndreaLM(config=preset("andrea-micro"))
    compiled = AndreaLM(config=preset("andrea-micro"), compile=True)
    compiled.load_state_dict(plain.state_dict())
    compiled.configure_model()
    assert list(compiled.state_dict()) == list(plain.state_dict())
    idx = torch.randint(0, 257, (2, 16))
    torch.testing.assert_close(compiled(idx)[0], plain(idx)[0], rtol=1e-4, atol=1e-4)


class CountingCallback(L.Callback):
    """A user's callback: counts the optimizer steps it saw."""

    def __init__(self):
        self.steps = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.steps += 1


def test_a_bare_trainer_gets_the_modules_guard_once_after_the_users_callbacks(tmp_path):
    module = AndreaLM(config=preset("andrea-micro", block_size=16), warmup_steps=0)
    data = torch.randint(0, 257, (4, 17))
    loader = DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=2)
    mine = CountingCallback()
    trainer = tiny_trainer(
        max_steps=2, limit_val_batches=0, callbacks=[mine], enable_checkpointing=True, default_root_dir=str(tmp_path)
    )
    trainer.fit(module, loader)
    trainer.validate(module, loader)  # every run attaches the module's callbacks again: still one guard
    guards = [c for c in trainer.callbacks if isinstance(c, NonFiniteGuard)]
    assert len(guards) == 1 and guards[0] is module.nonfinite
    assert mine in trainer.callbacks and mine.steps == 2, "the user's callbacks are kept"
    order = trainer.callbacks
    assert order.index(mine) < order.index(module.nonfinite) < order.index(trainer.checkpoint_callback)
    assert isinstance(order[-1], ModelCheckpoint), "ModelCheckpoint stays last"
    assert module.nonfinite.last_grad_norm is not None, "the guard's hooks ran: it measured the step's norm"
