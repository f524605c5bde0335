"""The optimizer and schedule plugins: parameter groups decided in one place, the built-ins keep the contract,
AndreaLM refuses bad choices in one line, a non-finite step is really skipped, and schedule-free's evaluation
weights go into checkpoints while a resumed fit continues from its training weights."""

from __future__ import annotations

import copy
from pathlib import Path

import lightning as L
import pytest
import torch
from andrea_testing import NaNAtStep, tiny_trainer

from andrea_lab.data import AndreaDataModule
from andrea_lab.fit.evaluation_weights import TRAINING_WEIGHTS_KEY, load_training_weights
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import ConfigError, preset
from andrea_lab.model.param_groups import assign_groups, parameter_assignment, rule_of_role, tag_parameters
from andrea_lab.model.registry import PluginError, resolve
from andrea_lab.model.transformer import Andrea
from andrea_lab.plugin.testing import check_optimizer, check_schedule

OPTIMIZERS = ["adamw", "adamw_independent_wd", "muon", "lion", "schedule_free"]
SCHEDULES = ["warmup_cosine", "wsd", "constant", "linear"]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_builtin_optimizer_keeps_the_contract(name):
    check_optimizer(name)  # trains; a step without gradients changes nothing; state_dict resumes bit for bit


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_builtin_schedule_keeps_the_contract(name):
    check_schedule(name)


@pytest.mark.parametrize(
    "kind, name", [("optimizer", "muon"), ("optimizer", "lion"), ("optimizer", "schedule_free"), ("schedule", "wsd")]
)
def test_docs_optimizers_md_gives_each_declared_option_its_declared_range(kind, name):
    """The built-ins' tables in docs/optimizers.md name every option with the range its declaration checks."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "optimizers.md").read_text(encoding="utf-8")
    (row,) = [line for line in docs.splitlines() if line.startswith(f"| `{name}` |")]
    for option_name, option in resolve(kind, name).options.items():
        assert f"`{option_name}`" in row, option_name
        if option.type in (int, float):
            assert option.describe().split(" in ")[-1] in row, (option_name, option.describe())


def test_roles_embeddings_and_the_tied_head_matrices_and_vectors():
    model = Andrea(preset("andrea-micro"))
    tag_parameters(model)
    rows = {
        row.name: row
        for row in parameter_assignment(model, {"muon": ("matrix",), "adamw": ("embedding", "vector")}, "t")
    }
    assert rows["token_embed.weight"].role == "embedding" and rows["token_embed.weight"].rule == "adamw"
    assert rows["position_embed.weight"].role == "embedding"
    assert "lm_head.weight" not in rows  # tied: the token embedding, listed once
    matrices = [row for row in rows.values() if row.role == "matrix"]
    assert matrices and all(row.rule == "muon" and row.decay and len(row.shape) == 2 for row in matrices)
    vectors = [row for row in rows.values() if row.role == "vector"]
    assert vectors and all(row.rule == "adamw" and not row.decay and len(row.shape) == 1 for row in vectors)


def test_the_single_adamw_rule_gives_todays_two_groups_in_model_order():
    model = Andrea(preset("andrea-micro"))
    tag_parameters(model)
    (decayed, plain) = assign_groups(model, {"adamw": ("matrix", "embedding", "vector")}, 0.1)["adamw"]
    assert [id(p) for p in decayed["params"]] == [id(p) for p in model.parameters() if p.dim() >= 2]
    assert [id(p) for p in plain["params"]] == [id(p) for p in model.parameters() if p.dim() < 2]
    assert (decayed["weight_decay"], plain["weight_decay"]) == (0.1, 0.0)


@pytest.mark.parametrize(
    "rules, message",
    [
        ({"muon": ("matrix",), "adamw": ("vector",)}, "leaves parameter role 'embedding' without an optimizer"),
        (
            {"muon": ("matrix",), "adamw": ("matrix", "embedding", "vector")},
            "gives parameter role 'matrix' two optimizers",
        ),
        ({"adamw": ("matrix", "embedding", "vector", "bias")}, "unknown parameter role 'bias'"),
    ],
)
def test_a_rule_set_that_leaves_a_role_out_or_gives_it_twice_is_refused(rules, message):
    with pytest.raises(ConfigError, match=message):
        rule_of_role(rules, "optimizer 'x'")


def test_wsd_is_flat_then_decays_over_its_last_fraction():
    from andrea_lab.fit.schedules import Constant, Linear, WarmupStableDecay

    wsd = WarmupStableDecay(warmup_steps=10, decay_steps=100, min_lr_ratio=0.0, decay_fraction=0.2)
    assert wsd.multiplier(0) == pytest.approx(0.1) and wsd.multiplier(9) == 1.0
    assert wsd.multiplier(79) == 1.0 and wsd.multiplier(90) == pytest.approx(0.5) and wsd.multiplier(100) == 0.0
    assert Constant(10, 100, 0.1).multiplier(500) == 1.0
    assert Linear(0, 100, 0.1).multiplier(50) == pytest.approx(0.55) and Linear(0, 100, 0.1).multiplier(200) == 0.1


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(optimizer="adamax"), PluginError, "unknown optimizer 'adamax'.*installed in andrea_lab.optimizer: adamw"),
        (dict(schedule="cosine"), PluginError, "unknown schedule 'cosine'.*did you mean"),
        (
            dict(optimizer="schedule_free", schedule="warmup_cosine"),
            ConfigError,
            "optimizer 'schedule_free' takes only a constant schedule .* got schedule 'warmup_cosine'",
        ),
        (dict(optimizer="muon", optimizer_args={"momentun": 0.9}), ConfigError, "its options: momentum, nesterov"),
        (dict(schedule="wsd", schedule_args={"decay_fraction": 0}), ConfigError, r"decay_fraction = 0 .* in \(0, 1\]"),
        (
            dict(schedule="wsd", schedule_args={"decay_fraction": 1.5}),
            ConfigError,
            r"decay_fraction = 1.5 .* in \(0, 1\]",
        ),
        # Each of these trained into a traceback mid-fit, or (ns_steps -1) was accepted and recorded as Muon.
        (dict(optimizer="muon", optimizer_args={"momentum": float("nan")}), ConfigError, r"momentum = nan .* \[0, 1\)"),
        (dict(optimizer="muon", optimizer_args={"momentum": 1e308}), ConfigError, r"momentum = 1e\+308 for optimizer"),
        (
            dict(optimizer="muon", optimizer_args={"ns_steps": -1}),
            ConfigError,
            r"ns_steps = -1 .* integer in \[1, 99\]",
        ),
        (
            dict(optimizer="muon", optimizer_args={"ns_steps": 10**9}),
            ConfigError,
            r"ns_steps = 1000000000 for optimizer",
        ),
        (dict(optimizer="lion", optimizer_args={"lion_betas": [0.9, 1.5]}), ConfigError, r"lion_betas = \[0.9, 1.5\]"),
        (dict(optimizer="schedule_free", optimizer_args={"r": float("inf")}), ConfigError, r"r = inf .* \[0, 10\]"),
        # The framework's own keys, refused in Python's words before ("Signature.bind() got multiple values").
        (
            dict(optimizer="muon", optimizer_args={"lr": 0.1}),
            ConfigError,
            "'lr' is not an option of optimizer 'muon' but",
        ),
        (dict(optimizer_args={"weight_decay": 0.0}), ConfigError, "but set by model.weight_decay"),
        (dict(schedule="wsd", schedule_args={"warmup_steps": 5}), ConfigError, "set by model.warmup_steps"),
    ],
)
def test_bad_choices_are_refused_when_the_module_is_built(kwargs, error, message):
    with pytest.raises(error, match=message):
        AndreaLM(config=preset("andrea-micro"), **kwargs)


def test_schedule_free_defaults_to_constant_and_the_choice_reaches_the_hparams():
    module = AndreaLM(config=preset("andrea-micro"), optimizer="schedule_free")
    assert module.optimizer_choice.schedule_name == "constant"
    assert module.hparams["optimizer"] == "schedule_free" and module.hparams["schedule"] is None
    assert AndreaLM(config=preset("andrea-micro")).optimizer_choice.schedule_name == "warmup_cosine"


def without_lr(state):
    """An optimizer's state_dict without the learning rates, which the schedule moves on every step, skipped or not."""
    if isinstance(state, dict):
        return {key: without_lr(value) for key, value in state.items() if key != "lr"}
    if isinstance(state, list):
        return [without_lr(value) for value in state]
    return state


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


class RecordsTheBadStep(L.Callback):
    """Snapshots weights and optimizer state before the bad step's update; compares after it."""

    def __init__(self, step: int) -> None:
        self.step, self.unchanged = step, None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step == self.step:
            state = without_lr(copy.deepcopy(optimizer.state_dict()))
            self.before = ([p.detach().clone() for p in pl_module.parameters()], state)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step + 1 and self.unchanged is None:
            weights, state = self.before
            after = without_lr(trainer.optimizers[0].state_dict())
            self.unchanged = same(weights, [p.detach() for p in pl_module.parameters()]) and same(state, after)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_skipped_step_changes_neither_weights_nor_optimizer_state(optimizer, tmp_path, text_corpus):
    L.seed_everything(0, verbose=False)
    module = NaNAtStep(bad_steps=(3,), on_nonfinite="skip", optimizer=optimizer)
    data = AndreaDataModule(corpus=str(text_corpus), tokenizer="byte", vocab_size=257, block_size=32, batch_size=4)
    recorder = RecordsTheBadStep(3)
    trainer = tiny_trainer(tmp_path, max_steps=5, log_every_n_steps=5, limit_val_batches=0, callbacks=[recorder])
    with pytest.warns(RuntimeWarning, match="update skipped"):
        trainer.fit(module, datamodule=data)
    assert module.nonfinite.skipped_steps == 1
    assert recorder.unchanged is True


def test_schedule_free_checkpoints_hold_evaluation_weights_and_resume_from_training_weights():
    module = AndreaLM(config=preset("andrea-micro", block_size=16), optimizer="schedule_free", warmup_steps=0)
    optimizer, _, plugin = module.optimizer_choice.build(module.model, 10)
    idx = torch.randint(0, module.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        module.model(idx, idx)[1].backward()
        optimizer.step()
        optimizer.zero_grad()
    module._optimizer_plugin = plugin
    module.evaluation_weights = lambda: plugin.evaluation_weights(optimizer)  # no trainer attached here
    training = {k: v.clone() for k, v in module.state_dict().items()}
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    assert all(torch.equal(training[k], v) for k, v in checkpoint[TRAINING_WEIGHTS_KEY].items())
    assert not torch.equal(checkpoint["state_dict"]["model.token_embed.weight"], training["model.token_embed.weight"])
    assert all(torch.equal(training[k], v) for k, v in module.state_dict().items()), "training weights restored"
    load_training_weights(checkpoint)
    assert TRAINING_WEIGHTS_KEY not in checkpoint
    assert all(torch.equal(training[k], v) for k, v in checkpoint["state_dict"].items())


def test_muons_combined_state_reads_and_writes_each_entry_in_the_part_that_owns_it():
    """Lightning walks ``optimizer.state.items()`` and writes every entry back when it moves an optimizer
    between devices (resume, teardown); reading an AdamW-part parameter must not add an empty entry to the
    Muon part, whose ``state_dict()`` would then fail on a parameter it does not own."""
    from lightning.fabric.utilities.optimizer import _optimizer_to_device

    module = AndreaLM(config=preset("andrea-micro", block_size=16), optimizer="muon", warmup_steps=0)
    optimizer, _, _ = module.optimizer_choice.build(module.model, 10)
    idx = torch.randint(0, module.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    module.model(idx, idx)[1].backward()
    optimizer.step()
    sizes = {rule: len(part.state) for rule, part in optimizer.parts.items()}
    assert len(optimizer.state) == sum(sizes.values()) and all(sizes.values())
    list(optimizer.state.values())
    _optimizer_to_device(optimizer, torch.device("cpu"))
    assert {rule: len(part.state) for rule, part in optimizer.parts.items()} == sizes
    saved = optimizer.state_dict()  # raised KeyError with the ChainMap view
    assert set(saved) == {"muon", "adamw"}
    embedding = module.model.token_embed.weight
    assert optimizer.state[embedding] is optimizer.parts["adamw"].state[embedding]


def test_the_schedule_still_reaches_muons_parts_after_its_state_is_loaded():
    """A part's load_state_dict replaces its group dicts; the combined optimizer must hand the schedule the new
    ones (a resumed Muon run trained on at the LR it was loaded with: its schedule stood still)."""
    module = AndreaLM(config=preset("andrea-micro", block_size=16), optimizer="muon", warmup_steps=0)
    optimizer, scheduler, _ = module.optimizer_choice.build(module.model, 10)
    optimizer.load_state_dict(optimizer.state_dict())
    before = [group["lr"] for part in optimizer.parts.values() for group in part.param_groups]
    scheduler.step()
    after = [group["lr"] for part in optimizer.parts.values() for group in part.param_groups]
    assert all(b > a for b, a in zip(before, after)), (before, after)  # the cosine decay reached every part
    assert [group["lr"] for group in optimizer.param_groups] == after


def _built_groups(optimizer: str, args: dict) -> dict[str, list[dict]]:
    """Each part's param groups (lr, weight_decay) as the optimizer plugin built them."""
    module = AndreaLM(
        config=preset("andrea-micro", block_size=16),
        optimizer=optimizer,
        optimizer_args=args,
        lr=4e-4,
        weight_decay=0.1,
        warmup_steps=0,
    )
    optimizer, _, _ = module.optimizer_choice.build(module.model, 10)
    parts = getattr(optimizer, "parts", {"all": optimizer})
    return {rule: part.param_groups for rule, part in parts.items()}


def test_lions_independent_decay_divides_the_decay_by_its_peak_lr_and_is_off_by_default():
    """lion-pytorch shrinks by lr_t * weight_decay: independent, the groups get weight_decay / lr, so the
    shrink per step at the peak is weight_decay whatever the LR (issue 55)."""
    plain = [g["weight_decay"] for g in _built_groups("lion", {})["all"]]
    independent = [g["weight_decay"] for g in _built_groups("lion", {"independent_decay": True})["all"]]
    assert plain == [0.1, 0.0]
    assert independent == pytest.approx([0.1 / 4e-4, 0.0])


def test_muons_adamw_part_takes_its_own_lr_and_muons_part_keeps_model_lr():
    default = _built_groups("muon", {})
    own = _built_groups("muon", {"adamw_lr_ratio": 7.5})
    assert {g["lr"] for g in default["adamw"]} == {g["lr"] for g in default["muon"]} == {4e-4}
    assert [g["lr"] for g in own["adamw"]] == pytest.approx([3e-3, 3e-3])
    assert {g["lr"] for g in own["muon"]} == {4e-4}


@pytest.mark.parametrize(
    "optimizer, args, message",
    [
        ("muon", {"adamw_lr_ratio": 0.0}, "adamw_lr_ratio"),
        ("muon", {"adamw_lr_ratio": -1.0}, "adamw_lr_ratio"),
        ("lion", {"independent_decay": "yes"}, "independent_decay"),
    ],
)
def test_the_new_options_refuse_a_bad_value_naming_it(optimizer, args, message):
    with pytest.raises(ConfigError, match=message):
        AndreaLM(config=preset("andrea-micro", block_size=16), optimizer=optimizer, optimizer_args=args)
