"""`andrea export --to hf` as a library call: exact files, refusals, nothing overwritten."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2Config

from andrea_lab.errors import UsageError
from andrea_lab.fit.module import AndreaLM
from andrea_lab.interop import require_transformers
from andrea_lab.interop.export_hf import export_checkpoint
from andrea_lab.interop.gpt2_config import NotExportableError
from andrea_lab.interop.import_hf import import_directory
from andrea_lab.model.config import preset
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO


def test_gpt2_to_andrea_to_gpt2_gives_back_the_same_tensors_and_config(gpt2_dir, tmp_path):
    directory = gpt2_dir(activation_function="relu", n_inner=64, layer_norm_epsilon=1e-6)
    import_directory(directory, tmp_path / "a.ckpt")
    exported = export_checkpoint(tmp_path / "a.ckpt", tmp_path / "back")
    original, back = load_file(directory / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert original.keys() == back.keys() and all(torch.equal(original[k], back[k]) for k in original)
    before, after = (GPT2Config.from_pretrained(d) for d in (directory, tmp_path / "back"))
    for key in (
        "vocab_size",
        "n_positions",
        "n_embd",
        "n_layer",
        "n_head",
        "n_inner",
        "activation_function",
        "layer_norm_epsilon",
        "bos_token_id",
        "eos_token_id",
        "tie_word_embeddings",
        "model_type",
    ):
        assert getattr(before, key) == getattr(after, key), key
    assert exported.files == [
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert json.loads((tmp_path / "back" / "generation_config.json").read_text())["eos_token_id"] == 256
    assert "| optimizer steps | 0 |" in (tmp_path / "back" / "README.md").read_text()


def _checkpoint(path, **config):
    module = AndreaLM(config=preset("andrea-micro", **config))
    AtomicCheckpointIO().save_checkpoint(
        {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams), "global_step": 0}, path
    )
    return path


def test_a_variant_gpt2_cannot_express_is_refused_and_nothing_is_written(tmp_path):
    ckpt = _checkpoint(tmp_path / "post.ckpt", norm_placement="post", activation="swiglu")
    with pytest.raises(NotExportableError, match="norm_placement 'post' .*; activation 'swiglu'"):
        export_checkpoint(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == [
        "post.ckpt",
        "post.ckpt.sha256.json",
    ]


def test_an_existing_directory_is_never_replaced_and_a_tokenizer_is_required(tmp_path):
    ckpt = _checkpoint(tmp_path / "m.ckpt")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="out already exists and is not an empty directory"):
        export_checkpoint(ckpt, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    with pytest.raises(UsageError, match="carries no tokenizer .*--tokenizer PATH"):
        export_checkpoint(ckpt, tmp_path / "new")
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new.*"))


def test_missing_transformers_is_one_message_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UsageError, match=r"needs the `transformers` package.*pip install -e '\.\[hf\]'"):
        require_transformers()
