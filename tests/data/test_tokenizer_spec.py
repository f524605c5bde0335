"""The tokenizer spec parsed once: what each kind allows, how it is identified in cache keys, what it
builds, and which tokenizer it gives a corpus that is already token ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from andrea_lab.data.tokenizer import TokenizerError, byte_tokenizer, save_tokenizer, train_bpe_tokenizer
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.files import sha256_file, sha256_text


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    save_tokenizer(train_bpe_tokenizer(["def main(): return value " * 50, "class Model: pass " * 50], 280), path)
    return path


def test_the_three_kinds_parse_and_a_missing_file_is_one_clear_error(tokenizer_file: Path) -> None:
    assert TokenizerSpec.of("bpe") == TokenizerSpec("bpe") and TokenizerSpec.of("bpe").learned
    assert TokenizerSpec.of("byte") == TokenizerSpec("byte") and not TokenizerSpec.of("byte").learned
    spec = TokenizerSpec.of(str(tokenizer_file))
    assert spec.kind == "file" and spec.path == tokenizer_file and str(spec) == str(tokenizer_file)
    assert TokenizerSpec.of(spec) is spec and TokenizerSpec.of("byte") == TokenizerSpec("byte")
    for bad in ("BPE", "", "  ", str(tokenizer_file.parent / "missing.json"), None):
        with pytest.raises(TokenizerError, match=r"is not 'bpe', 'byte', or an existing tokenizer.json file"):
            TokenizerSpec.of(bad)


def test_identity_names_a_file_by_its_content_not_its_path(tokenizer_file: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(tokenizer_file.read_bytes())
    assert TokenizerSpec.of("bpe").identity() == "bpe" and TokenizerSpec.of("byte").identity() == "byte"
    assert TokenizerSpec.of(str(copy)).identity() == "file:" + sha256_file(tokenizer_file)
    assert TokenizerSpec.of(str(copy)).identity() == TokenizerSpec.of(str(tokenizer_file)).identity()


@pytest.mark.parametrize(
    "spec, vocab_size, pattern",
    [
        ("byte", 300, r"tokenizer 'byte' has 257 ids but vocab_size is 300; set model.config.vocab_size: 257"),
        ("bpe", 256, r"tokenizer 'bpe' needs vocab_size between 257 .* and 65536 .*, got 256"),
        ("bpe", 65537, r"needs vocab_size between 257 .* got 65537"),
    ],
)
def test_the_model_vocabulary_is_checked_once_per_kind(spec: str, vocab_size: int, pattern: str) -> None:
    with pytest.raises(TokenizerError, match=pattern):
        TokenizerSpec.of(spec).check_model_vocab(vocab_size)


def test_limits_are_inclusive_and_a_file_must_fit_the_model(tokenizer_file: Path) -> None:
    TokenizerSpec.of("byte").check_model_vocab(257)
    for size in (257, 65536):
        TokenizerSpec.of("bpe").check_model_vocab(size)
        TokenizerSpec.of("bpe").check_shard_vocab(size)
    TokenizerSpec.of("byte").check_shard_vocab(8449)  # andrea tokenize ignores --vocab-size for byte
    spec = TokenizerSpec.of(str(tokenizer_file))
    spec.check_model_vocab(280)
    with pytest.raises(TokenizerError, match=r"has 280 ids but vocab_size is only 279"):
        spec.check_model_vocab(279)
    with pytest.raises(TokenizerError, match=r"needs --vocab-size between 257"):
        TokenizerSpec.of("bpe").check_shard_vocab(100)


def test_build_trains_only_for_bpe(tokenizer_file: Path) -> None:
    asked = []

    def documents() -> list[str]:
        asked.append(True)
        return ["alpha beta gamma delta " * 200]

    assert TokenizerSpec.of("byte").build(documents, 8449).to_str() == byte_tokenizer().to_str()
    assert TokenizerSpec.of(str(tokenizer_file)).build(documents, 8449).get_vocab_size() == 280
    assert asked == []
    assert TokenizerSpec.of("bpe").build(documents, 270).get_vocab_size() == 270 and asked == [True]


def test_a_tokenized_corpus_gets_its_own_tokenizer_or_a_matching_given_one(tokenizer_file: Path, tmp_path) -> None:
    own_sha = sha256_text(TokenizerSpec.of(str(tokenizer_file)).load_file().to_str())
    assert TokenizerSpec.of("bpe").for_tokens(tokenizer_file, own_sha).get_vocab_size() == 280
    assert TokenizerSpec.of("bpe").for_tokens(None, None) is None  # an llm.c file says nothing: caller warns
    assert TokenizerSpec.of("byte").for_tokens(None, None).get_vocab_size() == 257
    assert TokenizerSpec.of(str(tokenizer_file)).for_tokens(tokenizer_file, own_sha).get_vocab_size() == 280
    other = tmp_path / "other.json"
    save_tokenizer(byte_tokenizer(), other)
    assert TokenizerSpec.of(str(other)).for_tokens(None, None).get_vocab_size() == 257
    with pytest.raises(TokenizerError, match=r"is not the one that made .* leave data.tokenizer at 'bpe'"):
        TokenizerSpec.of(str(other)).for_tokens(tokenizer_file, own_sha)
