"""Byte-level tokenizers: exact round trips, exact vocab sizes, a reserved end-of-text id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models

from andrea_lab.data.tokenizer import (
    END_OF_TEXT,
    TokenizerError,
    byte_symbols,
    byte_tokenizer,
    eot_id,
    load_tokenizer,
    save_tokenizer,
    token_byte_lengths,
    tokenizer_from_json,
    train_bpe_tokenizer,
)

TRAIN_TEXT = [
    "def forward(self, x):\n    return self.proj(self.act(self.fc(x)))\n" * 5,
    "The quick brown fox jumps over the lazy dog. Über café naïve 東京 🙂\n" * 5,
    "for index in range(10):\n    total += values[index] * weights[index]\n" * 5,
]
BPE_VOCAB = 330


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return train_bpe_tokenizer(TRAIN_TEXT, BPE_VOCAB)


def test_byte_lengths_count_the_text_each_id_stands_for(bpe: Tokenizer) -> None:
    """What bits per byte divides by: the bytes of the encoded text, exactly, special tokens none."""
    for tokenizer in (bpe, byte_tokenizer()):
        lengths = token_byte_lengths(tokenizer)
        assert lengths[eot_id(tokenizer)] == 0
        for text in TRAIN_TEXT:
            ids = tokenizer.encode(text + END_OF_TEXT).ids
            assert sum(lengths[i] for i in ids) == len(text.encode("utf-8")) + len(END_OF_TEXT)  # literal text


def test_a_tokenizer_that_is_not_byte_level_has_no_byte_lengths() -> None:
    word_level = Tokenizer(models.WordLevel({"hello": 0, "<|endoftext|>": 1}, unk_token="<|endoftext|>"))
    assert token_byte_lengths(word_level) is None


def test_byte_tokenizer_has_257_ids_mapping_bytes_to_themselves() -> None:
    tokenizer = byte_tokenizer()
    assert tokenizer.get_vocab_size() == 257
    assert eot_id(tokenizer) == 256
    text = "héllo\x00\t 🙂"
    assert tokenizer.encode(text).ids == list(text.encode("utf-8"))


def test_byte_symbols_are_the_byte_level_alphabet() -> None:
    from tokenizers import pre_tokenizers

    symbols = byte_symbols()
    assert len(set(symbols)) == 256
    assert set(symbols) == set(pre_tokenizers.ByteLevel.alphabet())
    assert symbols[ord("A")] == "A" and symbols[ord(" ")] == "Ġ"


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips_any_text(text: str) -> None:
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode(text).ids
    assert 256 not in ids
    assert tokenizer.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_trained_bpe_round_trips_any_text(bpe: Tokenizer, text: str) -> None:
    ids = bpe.encode(text).ids
    assert eot_id(bpe) not in ids
    assert bpe.decode(ids) == text


def test_trained_bpe_has_exact_vocab_and_eot_last(bpe: Tokenizer) -> None:
    assert bpe.get_vocab_size() == BPE_VOCAB
    assert eot_id(bpe) == BPE_VOCAB - 1
    assert bpe.token_to_id(END_OF_TEXT) == BPE_VOCAB - 1
    assert len(json.loads(bpe.to_str())["model"]["vocab"]) == BPE_VOCAB - 1


def test_trained_bpe_compresses_its_corpus(bpe: Tokenizer) -> None:
    text = TRAIN_TEXT[0]
    assert len(bpe.encode(text).ids) < 0.6 * len(text.encode("utf-8"))


def test_training_is_deterministic(bpe: Tokenizer) -> None:
    assert train_bpe_tokenizer(TRAIN_TEXT, BPE_VOCAB).to_str() == bpe.to_str()


def test_literal_end_of_text_string_is_ordinary_text(bpe: Tokenizer) -> None:
    for tokenizer in (bpe, byte_tokenizer()):
        text = f"a{END_OF_TEXT}b"
        ids = tokenizer.encode(text).ids
        assert eot_id(tokenizer) not in ids
        assert tokenizer.decode(ids) == text


def test_end_of_text_is_a_single_id(bpe: Tokenizer) -> None:
    assert bpe.decode([eot_id(bpe)], skip_special_tokens=False) == END_OF_TEXT
    assert bpe.id_to_token(eot_id(bpe)) == END_OF_TEXT


def test_too_small_corpus_says_what_it_reached() -> None:
    expected = r"only reached 260 ids \(256 bytes \+ 3 merges.*vocab_size <= 260.*'byte'"
    with pytest.raises(TokenizerError, match=expected):
        train_bpe_tokenizer(["abababab"], 1000)


def test_vocab_below_bytes_is_rejected() -> None:
    with pytest.raises(TokenizerError, match="vocab_size >= 257"):
        train_bpe_tokenizer(TRAIN_TEXT, 100)


def test_bpe_of_exactly_257_ids_is_the_byte_alphabet() -> None:
    tokenizer = train_bpe_tokenizer(TRAIN_TEXT, 257)
    assert tokenizer.get_vocab_size() == 257 and eot_id(tokenizer) == 256


def test_save_and_load_round_trip(tmp_path: Path, bpe: Tokenizer) -> None:
    path = tmp_path / "sub" / "tokenizer.json"
    save_tokenizer(bpe, path)
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]  # no temporary left behind
    loaded = load_tokenizer(path)
    assert loaded.to_str() == bpe.to_str()
    assert eot_id(loaded) not in loaded.encode(END_OF_TEXT).ids  # runtime setting re-applied on load
    assert tokenizer_from_json(bpe.to_str()).encode("hello").ids == bpe.encode("hello").ids


def test_load_rejects_missing_and_eot_less_tokenizers(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "missing.json")
    bare = tmp_path / "bare.json"
    Tokenizer(models.BPE(vocab={"a": 0}, merges=[])).save(str(bare))
    with pytest.raises(TokenizerError, match=r"has no <\|endoftext\|> token"):
        load_tokenizer(bare)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(TokenizerError, match="not a valid tokenizer.json"):
        load_tokenizer(garbage)
