"""AtomicCheckpointIO on a full disk: the checkpoint and its manifest are both written before either replaces
anything, so the previous pair stays intact and verifiable; the error names the file and says so.
(A real 3 MB tmpfs needs root to mount; the writer is patched here to fail as ENOSPC does.)"""

from __future__ import annotations

import errno
import os

import pytest
import torch

from andrea_lab.data import checkpoint_state
from andrea_lab.errors import DiskFullError, UsageError
from andrea_lab.runs import checkpoint_io
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO, load_checkpoint, manifest_path


def test_a_full_disk_keeps_the_previous_checkpoint_and_says_so(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 10, "w": torch.ones(4)}, target)

    real_save = torch.save

    def save_until_full(obj, handle):
        real_save(obj, handle)
        handle.write(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", save_until_full)
    with pytest.raises(DiskFullError) as raised:
        io.save_checkpoint({"global_step": 20, "w": torch.zeros(4)}, target)
    message = str(raised.value)
    assert f"the disk is full (No space left on device) while writing {target}" in message
    assert "the previous version of it is intact" in message
    assert f"resume from one with --ckpt_path (e.g. {target})" in message
    monkeypatch.undo()
    assert load_checkpoint(target)["global_step"] == 10, "verified against its (old) manifest"
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt", manifest_path(target).name]


def test_a_full_disk_while_writing_the_manifest_replaces_nothing(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 10}, target)
    real_dumps = checkpoint_io.json.dumps

    def dumps_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_io.json, "dumps", dumps_full)
    with pytest.raises(DiskFullError, match=r"while writing .*last\.ckpt\.sha256\.json"):
        io.save_checkpoint({"global_step": 20}, target)
    monkeypatch.setattr(checkpoint_io.json, "dumps", real_dumps)
    assert load_checkpoint(target)["global_step"] == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256.json"]


def test_a_checkpoint_is_hashed_once_per_process_until_it_changes(tmp_path, monkeypatch):
    """The CLI's check, _parse_ckpt_path and the trainer's load all verify a --ckpt_path: one sha256 is
    enough while neither the file nor its manifest changes; a changed file is hashed (and refused) again."""
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    hashed = []
    real = checkpoint_io.sha256_file
    monkeypatch.setattr(checkpoint_io, "sha256_file", lambda p: hashed.append(p) or real(p))
    for _ in range(3):
        checkpoint_io.verify_checkpoint(path)
    assert len(hashed) == 1
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # a later write
    with pytest.raises(UsageError, match="damaged: its sha256 differs"):
        checkpoint_io.verify_checkpoint(path)
    assert len(hashed) == 2


def test_a_failed_rename_of_the_checkpoint_leaves_the_previous_pair_and_no_temporary_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 10}, target)

    def replace_fails(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", replace_fails)  # files.publish, the one rename, fails
    with pytest.raises(OSError, match="cross-device"):
        io.save_checkpoint({"global_step": 20}, target)
    monkeypatch.undo()
    assert load_checkpoint(target)["global_step"] == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256.json"]


def test_the_stored_config_hyperparameters_and_tokenizer_have_one_reader_each():
    from andrea_lab.data.tokenizer import byte_tokenizer

    tokenizer = byte_tokenizer()
    checkpoint = {
        "hyper_parameters": {"config": {"d_model": 16}, "lr": 1e-3, "_instantiator": "x"},
        checkpoint_state.DATA_STATE_KEY: {checkpoint_state.TOKENIZER_STATE_KEY: tokenizer.to_str()},
    }
    assert checkpoint_io.stored_hyperparameters(checkpoint) == {"config": {"d_model": 16}, "lr": 1e-3}
    assert checkpoint_io.stored_model_config(checkpoint) == {"d_model": 16}
    assert checkpoint_io.stored_tokenizer(checkpoint).to_str() == tokenizer.to_str()
    assert checkpoint_io.stored_data_state(checkpoint) == checkpoint[checkpoint_state.DATA_STATE_KEY]
    for odd in ({}, {"hyper_parameters": []}, {"hyper_parameters": {"config": "x"}}, [], None):
        assert checkpoint_io.stored_model_config(odd) is None and checkpoint_io.stored_tokenizer(odd) is None
        assert checkpoint_io.stored_data_state(odd) == {}


def test_the_tokenizer_is_read_where_the_data_module_saves_it():
    """What Lightning stores for the data module (its state_dict under its class name) is what the one
    reader finds: the key is the class name, and the state holds the tokenizer under the reader's key."""
    from andrea_lab.data import AndreaDataModule
    from andrea_lab.data.checkpoint_state import data_checkpoint_state
    from andrea_lab.data.tokenizer import byte_tokenizer

    tokenizer = byte_tokenizer()
    checkpoint = {type(AndreaDataModule()).__name__: data_checkpoint_state(tokenizer, 257, corpus=None)}
    assert checkpoint_io.stored_tokenizer(checkpoint).to_str() == tokenizer.to_str()


def test_no_reader_of_a_checkpoint_indexes_hyper_parameters_by_hand():
    from pathlib import Path

    package = Path(checkpoint_io.__file__).parents[1]  # andrea_lab/, not runs/
    readers = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if '["hyper_parameters"]' in p.read_text(encoding="utf-8")
    ]
    assert readers == []
