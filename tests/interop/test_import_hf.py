"""`andrea import` from a directory: a checkpoint like a fit's, the same logits, the tokenizer carried."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from andrea_lab.errors import UsageError
from andrea_lab.fit.module import AndreaLM
from andrea_lab.interop.gpt2_config import NotImportableError
from andrea_lab.interop.import_hf import import_directory
from andrea_lab.runs.checkpoint_io import load_checkpoint, manifest_path, stored_tokenizer


def andrea_model(path):
    checkpoint = load_checkpoint(path)
    module = AndreaLM(**checkpoint["hyper_parameters"])
    module.load_state_dict(checkpoint["state_dict"])
    return module.model.eval(), checkpoint


def test_import_gives_a_checkpoint_with_the_same_logits_and_the_tokenizer(gpt2_dir, tmp_path):
    directory = gpt2_dir(n_inner=96, activation_function="gelu_pytorch_tanh")
    result = import_directory(directory, tmp_path / "gpt2.ckpt")
    assert result.config.mlp_ratio == 3.0 and result.config.activation == "andrea-lab:gelu"
    assert manifest_path(tmp_path / "gpt2.ckpt").is_file()  # written like a fit's checkpoints, verified on load
    model, checkpoint = andrea_model(tmp_path / "gpt2.ckpt")
    reference = AutoModelForCausalLM.from_pretrained(directory).eval()
    ids = torch.randint(0, 257, (3, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(ids)[0] - reference(ids).logits).abs().max() <= 1e-5
    tokenizer = stored_tokenizer(checkpoint)
    assert tokenizer.encode("héllo").ids == list("héllo".encode())
    assert checkpoint["AndreaDataModule"]["eot_id"] == 256 and result.tokenizer_file == tmp_path / "gpt2.tokenizer.json"
    assert result.tokenizer_file.is_file() and checkpoint["global_step"] == 0


def test_relu_imports_as_relu(gpt2_dir, tmp_path):
    result = import_directory(gpt2_dir(activation_function="relu"), tmp_path / "relu.ckpt")
    assert result.config.activation == "andrea-lab:relu"


def test_weights_without_a_tokenizer_import_and_say_so(gpt2_dir, tmp_path):
    result = import_directory(gpt2_dir(tokenizer=False), tmp_path / "bare.ckpt")
    assert result.tokenizer_file is None and "has no tokenizer files" in result.tokenizer_source
    assert not (tmp_path / "bare.tokenizer.json").exists()
    assert load_checkpoint(tmp_path / "bare.ckpt")["AndreaDataModule"]["tokenizer_json"] is None
    # ... and a tokenizer given separately is carried.
    with_tokenizer = import_directory(
        gpt2_dir(tokenizer=False, name="b"),
        tmp_path / "b.ckpt",
        tokenizer_source=gpt2_dir(name="with-tokenizer") / "tokenizer.json",
    )
    assert with_tokenizer.tokenizer_file.is_file()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="--tokenizer .*empty: .*has no tokenizer files"):
        import_directory(gpt2_dir(tokenizer=False, name="c"), tmp_path / "c.ckpt", tokenizer_source=tmp_path / "empty")


def test_nothing_is_overwritten_and_bad_directories_are_named(gpt2_dir, tmp_path):
    directory = gpt2_dir()
    (tmp_path / "taken.ckpt").write_bytes(b"mine")
    with pytest.raises(UsageError, match="taken.ckpt already exists; an import never overwrites"):
        import_directory(directory, tmp_path / "taken.ckpt")
    assert (tmp_path / "taken.ckpt").read_bytes() == b"mine"
    (tmp_path / "fresh.ckpt.sha256.json").write_text("the user's file")  # the manifest the import would write
    with pytest.raises(UsageError, match="fresh.ckpt.sha256.json already exists; an import never overwrites"):
        import_directory(directory, tmp_path / "fresh.ckpt")
    assert (tmp_path / "fresh.ckpt.sha256.json").read_text() == "the user's file"
    assert not (tmp_path / "fresh.ckpt").exists()
    with pytest.raises(UsageError, match="nowhere is not a directory"):
        import_directory(tmp_path / "nowhere", tmp_path / "x.ckpt")
    with pytest.raises(UsageError, match="has no config.json"):
        import_directory(tmp_path, tmp_path / "x.ckpt")
    (directory / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(NotImportableError, match="has model_type 'llama'; andrea imports GPT-2 models only"):
        import_directory(directory, tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(gpt2_dir, tmp_path):
    small = gpt2_dir(name="small", tokenizer=False, vocab_size=200, bos_token_id=0, eos_token_id=0)
    with pytest.raises(NotImportableError, match="has 257 ids but the model only 200"):
        import_directory(small, tmp_path / "x.ckpt", tokenizer_source=gpt2_dir(name="t") / "tokenizer.json")
