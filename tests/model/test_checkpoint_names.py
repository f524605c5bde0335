"""A checkpoint selects its plugins by registered NAME (``andrea-lab:post``), never by module path, so
moving the plugin code into andrea_lab/model/ (built-ins included) leaves every checkpoint a
user has loadable: tests/model/data/pre_move.ckpt was written by :func:`write_micro_checkpoint` at
commit f345e43, the last one before the move, and still loads, resolves and computes the same loss."""

from __future__ import annotations

import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import AndreaConfig, preset
from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.model.registry import resolve, selected_entry_point
from andrea_lab.model.transformer import Andrea
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO, load_checkpoint, stored_model_config

DATA = Path(__file__).parent / "data"
PRE_MOVE = DATA / "pre_move.ckpt"
#: The loss write_micro_checkpoint printed for pre_move.ckpt's weights on TOKENS, with the code of f345e43.
PRE_MOVE_LOSS = 4.156922340393066
PLUGINS = dict(norm_placement="andrea-lab:post", activation="swiglu", norm="rmsnorm")  # not the defaults
TOKENS = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))


def write_micro_checkpoint(path: Path) -> None:
    """One optimizer step of a micro model with non-default plugins, saved weights-only as andrea saves."""
    torch.manual_seed(0)
    config = preset("andrea-micro", vocab_size=64, block_size=16, d_model=32, n_layer=2, n_head=2, **PLUGINS)
    data = DataLoader(TensorDataset(TOKENS[:, :-1], TOKENS[:, 1:]), batch_size=2)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
    )
    trainer.fit(AndreaLM(config=config, warmup_steps=0), data)
    trainer.save_checkpoint(path, weights_only=True)


def strings(value) -> list[str]:
    """Every string anywhere in a loaded checkpoint (keys too), tensors aside."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in strings(key) + strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in strings(item)]
    return []


@pytest.fixture(scope="module")
def current_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "now.ckpt"
    write_micro_checkpoint(path)
    return path


@pytest.mark.parametrize("which", ["pre_move", "current"])
def test_a_checkpoint_names_its_plugins_and_no_module(which, current_checkpoint, tmp_path):
    path = current_checkpoint if which == "current" else shutil.copy(PRE_MOVE, tmp_path / PRE_MOVE.name)
    checkpoint = load_checkpoint(path)  # weights-only: a module path could only be a string in it
    assert not [text for text in strings(checkpoint) if "andrea_lab." in text or "andrea_lab/" in text]
    stored = stored_model_config(checkpoint)
    for kind in PLUGIN_KINDS:
        assert ":" not in stored[kind] or stored[kind].startswith("andrea-lab:"), stored[kind]
        assert selected_entry_point(kind, stored[kind]) is not None, f"{kind} {stored[kind]!r} selects no plugin"
    assert {kind: stored[kind] for kind in PLUGINS} == PLUGINS


def test_a_checkpoint_from_before_the_move_resolves_to_the_moved_classes_and_the_same_loss(tmp_path):
    shutil.copy(PRE_MOVE.with_name(PRE_MOVE.name + ".sha256.json"), tmp_path)  # verified against its manifest
    checkpoint = load_checkpoint(shutil.copy(PRE_MOVE, tmp_path / PRE_MOVE.name))
    config = AndreaConfig(**stored_model_config(checkpoint))
    placement = resolve("norm_placement", config.norm_placement)
    assert placement.__module__ == "andrea_lab.model.builtin.placements" and placement.__name__ == "PostNorm"
    assert resolve("norm", config.norm).__module__ == "andrea_lab.model.builtin.norms"
    model = Andrea(config)
    weights = {key.removeprefix("model."): value for key, value in checkpoint["state_dict"].items()}
    model.load_state_dict(weights, strict=True)
    model.eval()
    with torch.no_grad():
        _, loss = model(TOKENS[:, :-1], TOKENS[:, 1:])
    assert loss.item() == pytest.approx(PRE_MOVE_LOSS, abs=1e-6)
