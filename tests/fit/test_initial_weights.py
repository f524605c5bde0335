"""``model.init_from``: weights only, through the safe loader; another architecture or tokenizer is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from andrea_lab.data import byte_tokenizer, train_bpe_tokenizer
from andrea_lab.errors import UsageError
from andrea_lab.fit.initial_weights import InitialWeights
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import preset
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO, UnsafeCheckpointError


def saved(path: Path, module: AndreaLM, tokenizer_json=None) -> Path:
    AtomicCheckpointIO().save_checkpoint(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "AndreaDataModule": {"tokenizer_json": tokenizer_json},
        },
        path,
    )
    return path


def test_the_weights_are_loaded_and_not_kept_as_a_hyperparameter(tmp_path):
    torch.manual_seed(0)
    source = AndreaLM(config=preset("andrea-micro"))
    module = AndreaLM(config=preset("andrea-micro"), lr=1e-3, init_from=str(saved(tmp_path / "a.ckpt", source)))
    assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), source.state_dict().values()))
    assert "init_from" not in module.hparams and module.hparams.lr == 1e-3


def test_another_architecture_is_named_field_by_field(tmp_path):
    path = saved(tmp_path / "a.ckpt", AndreaLM(config=preset("andrea-micro")))
    with pytest.raises(
        UsageError,
        match=r"model.init_from .*a.ckpt holds a model of another architecture than "
        r"model.config \(d_model: checkpoint 64, config 32; n_head",
    ):
        AndreaLM(config=preset("andrea-micro", d_model=32, n_head=4), init_from=str(path))


def test_a_state_dict_without_a_config_is_checked_by_its_shapes(tmp_path):
    module = AndreaLM(config=preset("andrea-micro"))
    AtomicCheckpointIO().save_checkpoint({"state_dict": module.state_dict()}, tmp_path / "bare.ckpt")
    with pytest.raises(UsageError, match="another architecture .*size mismatch"):
        AndreaLM(config=preset("andrea-micro", d_model=32, n_head=4), init_from=str(tmp_path / "bare.ckpt"))
    AtomicCheckpointIO().save_checkpoint({"epoch": 3}, tmp_path / "empty.ckpt")
    with pytest.raises(UsageError, match="holds no model weights"):
        InitialWeights(str(tmp_path / "empty.ckpt"))


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_that_runs_code_is_refused_unrun(tmp_path):
    torch.save({"state_dict": {}, "payload": Payload(tmp_path / "RAN")}, tmp_path / "shared.ckpt")
    with pytest.raises(UnsafeCheckpointError):
        AndreaLM(config=preset("andrea-micro"), init_from=str(tmp_path / "shared.ckpt"))
    assert not (tmp_path / "RAN").exists()


def test_data_with_another_tokenizer_is_refused_and_the_same_vocabulary_accepted(tmp_path, text_corpus):
    initial = InitialWeights(
        str(saved(tmp_path / "a.ckpt", AndreaLM(config=preset("andrea-micro")), byte_tokenizer().to_str()))
    )
    initial.check_tokenizer(byte_tokenizer(), "byte")
    documents = [path.read_text(encoding="utf-8") for path in sorted(text_corpus.iterdir())]
    with pytest.raises(
        UsageError,
        match=r"trained with another tokenizer than the data's \(data.tokenizer 'bpe'\): "
        r"\d+ of its 257 tokens have other ids",
    ):
        initial.check_tokenizer(train_bpe_tokenizer(documents, vocab_size=300), "bpe")


def test_reading_init_from_does_not_import_the_data_module():
    import subprocess
    import sys

    code = "import sys, andrea_lab.fit.initial_weights; print('andrea_lab.data.datamodule' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
