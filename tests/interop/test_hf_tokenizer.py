"""The run's tokenizer through transformers: same ids, same text, <|endoftext|> as bos and eos."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from andrea_lab.data import byte_tokenizer, train_bpe_tokenizer
from andrea_lab.data.tokenizer import TokenizerError, eot_id
from andrea_lab.interop.hf_tokenizer import TOKENIZER_CLASS, read_tokenizer, save_fast_tokenizer

TEXTS = ["def main(argv):\n    return 0\n", "naïve café ✓ 日本語 \U0001f600", "x <|endoftext|> y", "", "   \t\n"]


@pytest.fixture(scope="module")
def bpe(text_corpus):
    documents = [path.read_text(encoding="utf-8") for path in sorted(text_corpus.iterdir())]
    return train_bpe_tokenizer(documents, vocab_size=600)


@pytest.mark.parametrize("kind", ["bpe", "byte"])
def test_exported_tokenizer_loads_as_a_fast_tokenizer_with_the_same_ids(kind, bpe, tmp_path):
    ours = bpe if kind == "bpe" else byte_tokenizer()
    save_fast_tokenizer(ours, tmp_path, model_max_length=64)
    theirs = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert isinstance(theirs, PreTrainedTokenizerFast) and theirs.is_fast
    assert theirs.eos_token == theirs.bos_token == "<|endoftext|>"
    assert theirs.eos_token_id == theirs.bos_token_id == eot_id(ours) == ours.get_vocab_size() - 1
    assert theirs.model_max_length == 64 and len(theirs) == ours.get_vocab_size()
    for text in TEXTS:
        ids = theirs(text)["input_ids"]
        assert ids == ours.encode(text).ids, text  # literal "<|endoftext|>" is bytes in both
        assert theirs.decode(ids) == text
    if kind == "bpe":
        assert len(theirs("def main(argv):")["input_ids"]) < len("def main(argv):")  # merges are used


def test_the_files_name_a_class_transformers_4_and_5_both_know(tmp_path):
    save_fast_tokenizer(byte_tokenizer(), tmp_path, model_max_length=32)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == TOKENIZER_CLASS
    assert json.loads((tmp_path / "special_tokens_map.json").read_text()) == {
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
    }


def test_a_directory_tokenizer_is_read_back_identically(bpe, tmp_path):
    save_fast_tokenizer(bpe, tmp_path, model_max_length=64)
    tokenizer, described = read_tokenizer(tmp_path)
    assert described.endswith("tokenizer.json") and tokenizer.to_str() == bpe.to_str()  # unchanged
    assert tokenizer.encode(TEXTS[0]).ids == bpe.encode(TEXTS[0]).ids


def test_gpt2_vocab_and_merges_files_are_converted(bpe, tmp_path):
    """A directory with GPT-2's vocab.json + merges.txt (no tokenizer.json) gives the same tokenizer."""
    bpe.model.save(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    tokenizer, described = read_tokenizer(tmp_path)
    assert "converted" in described
    assert tokenizer.encode(TEXTS[0]).ids == bpe.encode(TEXTS[0]).ids


def test_no_tokenizer_files_is_none_with_the_reason_and_a_foreign_one_is_refused(tmp_path):
    tokenizer, why = read_tokenizer(tmp_path)
    assert tokenizer is None and "has no tokenizer files" in why
    foreign = byte_tokenizer()
    text = json.loads(foreign.to_str())
    text["added_tokens"][0]["content"] = "</s>"
    (tmp_path / "tokenizer.json").write_text(json.dumps(text))
    with pytest.raises(TokenizerError, match="has no <|endoftext|> token"):
        read_tokenizer(tmp_path)
