"""The tokenized-corpus cache: hits skip training, damage is detected and rebuilt, builds are atomic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data import cache
from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.cache import default_cache_root, load_or_build
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.shards import shard_dir_corpus
from andrea_lab.data.token_file import read_token_file
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.files import sha256_file, sha256_text

VOCAB = 300


def _build(corpus_dir: Path, cache: Path, **overrides):
    settings = {"tokenizer_spec": "bpe", "vocab_size": VOCAB, "val_fraction": 0.25, "cache_dir": str(cache)}
    settings.update(overrides)
    return load_or_build(resolve_corpus(str(corpus_dir)), **settings)


def _entries(root: Path) -> list[str]:
    """What is in the cache root besides the build locks (empty files, see test_an_entry_is_built_under_its_lock)."""
    return sorted(path.name for path in root.iterdir() if not path.name.endswith(".lock"))


def _forbid_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer was retrained although the cache should have been used")

    monkeypatch.setattr(tokenizers_lib, "train_bpe_tokenizer", refuse)


def test_first_build_writes_a_complete_shard_directory(generated_corpus: Path, tmp_path: Path) -> None:
    entry = _build(generated_corpus, tmp_path / "cache")
    assert not entry.hit
    assert entry.directory.parent == tmp_path / "cache" and entry.directory.name.startswith("tokens-")
    names = sorted(p.name for p in entry.directory.iterdir())
    assert names == ["manifest.json", "tokenizer.json", "train_000000.bin", "val_000000.bin"]
    left = sorted(p.name for p in (tmp_path / "cache").iterdir())  # no staging dir left; the (empty) lock file is
    assert left == [f".{entry.directory.name}.lock", entry.directory.name]

    manifest = json.loads((entry.directory / "manifest.json").read_text())
    assert manifest["format"] == "andrea-shards" and manifest["complete"] and manifest == entry.manifest
    assert manifest["tokenizer"]["vocab_size"] == VOCAB and manifest["tokenizer"]["eot_id"] == VOCAB - 1
    assert manifest["totals"]["records"] == 12 and manifest["end_of_text"] == "between documents"
    train, val = read_token_file(entry.train_path), read_token_file(entry.val_path)
    assert manifest["totals"]["train_tokens"] == len(train) and manifest["totals"]["val_tokens"] == len(val)
    assert manifest["totals"]["train_documents"] + manifest["totals"]["val_documents"] == 12
    assert len(manifest["train_documents"]) == manifest["totals"]["train_documents"]
    for shard, tokens in zip(manifest["shards"], (train, val)):
        assert shard["bytes"] == (entry.directory / shard["file"]).stat().st_size
        assert shard["sha256"] == sha256_file(entry.directory / shard["file"]) and shard["max_token_id"] == tokens.max()
    assert np.count_nonzero(np.asarray(train) == VOCAB - 1) == manifest["totals"]["train_documents"] - 1
    assert tokenizers_lib.load_tokenizer(entry.tokenizer_path).get_vocab_size() == VOCAB
    # the data module's reader (shards.py) reads it as it reads any shard directory
    assert shard_dir_corpus(entry.directory).train == [entry.train_path]


def test_an_entry_of_the_earlier_layout_is_not_found_read_or_deleted(generated_corpus: Path, tmp_path: Path) -> None:
    """The earlier cache named an entry by the first 16 hex digits of the key with ``format`` 1 and held
    train.bin / val.bin: an entry there is left as it is and a new one is built beside it."""
    corpus = resolve_corpus(str(generated_corpus))
    fields = cache.cache_settings(corpus.fingerprint(), TokenizerSpec.parse("bpe"), VOCAB, 0.25)
    old_key = sha256_text(json.dumps({**fields, "format": 1}, sort_keys=True))
    old = tmp_path / "cache" / old_key[:16]
    old.mkdir(parents=True)
    (old / "manifest.json").write_text(json.dumps({"key": old_key, "format": 1}))
    (old / "train.bin").write_bytes(b"an earlier entry")
    before = {path.name: path.read_bytes() for path in old.iterdir()}
    entry = _build(generated_corpus, tmp_path / "cache")
    assert not entry.hit and entry.directory != old
    assert {path.name: path.read_bytes() for path in old.iterdir()} == before


def test_second_build_is_a_hit_without_training(generated_corpus: Path, tmp_path: Path, monkeypatch) -> None:
    first = _build(generated_corpus, tmp_path / "cache")
    _forbid_training(monkeypatch)
    second = _build(generated_corpus, tmp_path / "cache")
    assert second.hit and second.directory == first.directory
    assert second.manifest == first.manifest


def test_settings_that_change_the_result_change_the_key(generated_corpus: Path, tmp_path: Path) -> None:
    base = _build(generated_corpus, tmp_path / "cache").directory
    assert _build(generated_corpus, tmp_path / "cache", vocab_size=VOCAB + 1).directory != base
    assert _build(generated_corpus, tmp_path / "cache", val_fraction=0.3).directory != base
    assert _build(generated_corpus, tmp_path / "cache", tokenizer_spec="byte", vocab_size=257).directory != base
    (generated_corpus / "doc_01.txt").write_text("new text " * 50)
    assert _build(generated_corpus, tmp_path / "cache").directory != base


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete_manifest", "garble_manifest", "delete_val"])
def test_damaged_entry_warns_and_is_rebuilt(generated_corpus: Path, tmp_path: Path, damage: str) -> None:
    entry = _build(generated_corpus, tmp_path / "cache")
    good_train = entry.train_path.read_bytes()
    if damage == "truncate":
        with open(entry.train_path, "r+b") as handle:
            handle.truncate(len(good_train) - 10)
    elif damage == "flip":
        corrupted = bytearray(good_train)
        corrupted[-1] ^= 0xFF
        entry.train_path.write_bytes(bytes(corrupted))  # same size: only the sha256 can tell
    elif damage == "delete_manifest":
        (entry.directory / "manifest.json").unlink()
    elif damage == "garble_manifest":
        (entry.directory / "manifest.json").write_text("{")
    else:
        entry.val_path.unlink()

    with pytest.warns(UserWarning, match=r"cache .* is damaged .*rebuilding"):
        rebuilt = _build(generated_corpus, tmp_path / "cache")
    assert not rebuilt.hit and rebuilt.directory == entry.directory
    assert rebuilt.train_path.read_bytes() == good_train
    assert _entries(tmp_path / "cache") == [entry.directory.name]
    assert _build(generated_corpus, tmp_path / "cache").hit


def test_failed_build_leaves_nothing_behind(generated_corpus: Path, tmp_path: Path, monkeypatch) -> None:
    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(tokenizers_lib, "encode_documents", crash)
    with pytest.raises(RuntimeError, match="killed mid-build"):
        _build(generated_corpus, tmp_path / "cache")
    assert _entries(tmp_path / "cache") == []


def test_tokenizer_is_trained_on_training_documents_only(generated_corpus: Path, tmp_path: Path, monkeypatch) -> None:
    seen: list[str] = []
    real_train = tokenizers_lib.train_bpe_tokenizer

    def spy(documents, vocab_size):
        documents = list(documents)
        seen.extend(documents)
        return real_train(documents, vocab_size)

    monkeypatch.setattr(tokenizers_lib, "train_bpe_tokenizer", spy)
    entry = _build(generated_corpus, tmp_path / "cache")
    assert len(seen) == len(entry.manifest["train_documents"]) < 12


def test_single_document_is_split_by_tokens(tmp_path: Path, make_text_corpus) -> None:
    path = make_text_corpus(tmp_path / "one", n_files=1, words_per_file=2000)[0]
    entry = _build(path, tmp_path / "cache", val_fraction=0.2)
    train, val = read_token_file(entry.train_path), read_token_file(entry.val_path)
    assert abs(len(val) / (len(train) + len(val)) - 0.2) < 0.01
    tokenizer = tokenizers_lib.load_tokenizer(entry.tokenizer_path)
    assert tokenizer.decode(np.concatenate([train, val]).tolist()) == path.read_text(encoding="utf-8")


def test_cache_root_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert default_cache_root(str(tmp_path / "x")) == tmp_path / "x"
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "env"))
    assert default_cache_root() == tmp_path / "env"
    monkeypatch.delenv("ANDREA_LAB_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_root() == tmp_path / "home" / ".cache" / "andrea-lab"


def test_default_cache_dir_comes_from_the_environment(generated_corpus: Path, fresh_cache: Path) -> None:
    entry = load_or_build(resolve_corpus(str(generated_corpus)), "byte", 257, 0.25)
    assert entry.directory.parent == fresh_cache


def _held_elsewhere(directory: Path) -> bool:
    """Whether another holder has the build lock of ``directory`` right now (a second lock cannot take it)."""
    from filelock import FileLock, Timeout

    other = FileLock(directory.with_name(f".{directory.name}.lock"))
    try:
        other.acquire(timeout=0)
    except Timeout:
        return True
    other.release()
    return False


def test_an_entry_is_checked_and_built_under_its_lock(generated_corpus: Path, tmp_path: Path, monkeypatch) -> None:
    built, real = [], cache._build_entry

    def build(corpus, tokenizer, vocab_size, val_fraction, key, directory):
        built.append(_held_elsewhere(directory))
        return real(corpus, tokenizer, vocab_size, val_fraction, key, directory)

    monkeypatch.setattr(cache, "_build_entry", build)
    entry = _build(generated_corpus, tmp_path / "cache")
    assert built == [True] and not _held_elsewhere(entry.directory)  # held while building, released after
    assert _build(generated_corpus, tmp_path / "cache").hit and built == [True]


def test_cached_shards_are_written_under_their_lock(tmp_path: Path, small_texts, jsonl_writer, monkeypatch) -> None:
    held, real = [], cache.tokenize_corpus

    def tokenize(corpus, out, options):
        held.append(_held_elsewhere(out))
        return real(corpus, out, options)

    monkeypatch.setattr(cache, "tokenize_corpus", tokenize)
    corpus = resolve_corpus(str(jsonl_writer(tmp_path / "c.jsonl", small_texts)))
    tokens = cache.cached_shards(corpus, TokenizerSpec.parse("byte"), 257, 0.2, 0, str(tmp_path / "cache"))
    assert held == [True] and tokens.root.name.startswith("shards-") and not _held_elsewhere(tokens.root)
