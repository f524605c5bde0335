"""The tokenized-corpus cache: hits skip training, damage is detected and rebuilt, builds are atomic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data import cache, parallel_encode
from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.cache import default_cache_root, load_or_build
from andrea_lab.data.corpus import CorpusError, resolve_corpus
from andrea_lab.data.shards import shard_dir_corpus
from andrea_lab.data.token_file import read_token_file
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
    assert manifest["totals"]["records"] == 12 and manifest["settings"]["end_of_text"] == "between documents"
    assert manifest["settings"]["split"] == "at least one on each side" and manifest["settings"]["seed"] is None
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


def _earlier_key(corpus, cache_format: int) -> str:
    """The key the earlier cache (formats 1 and 2) gave these settings: its own dict, hashed."""
    fields = {
        "format": cache_format,
        "corpus": corpus.fingerprint(),
        "tokenizer": "bpe",
        "vocab_size": VOCAB,
        "val_fraction": repr(0.25),
        "split": 1,
    }
    return sha256_text(json.dumps(fields, sort_keys=True))


def test_entries_of_earlier_layouts_are_not_found_read_or_deleted(generated_corpus: Path, tmp_path: Path) -> None:
    """Format 1 named an entry ``<key[:16]>/`` with train.bin / val.bin; format 2 ``tokens-<key[:16]>/``
    keyed by its own settings dict. Both are left as they are and a new entry is built beside them."""
    corpus = resolve_corpus(str(generated_corpus))
    olds = [
        tmp_path / "cache" / _earlier_key(corpus, 1)[:16],
        tmp_path / "cache" / f"tokens-{_earlier_key(corpus, 2)[:16]}",
    ]
    for old in olds:
        old.mkdir(parents=True)
        (old / "manifest.json").write_text(json.dumps({"key": "an earlier entry", "format": "andrea-shards"}))
        (old / "train.bin").write_bytes(b"an earlier entry")
    before = [{path.name: path.read_bytes() for path in old.iterdir()} for old in olds]
    entry = _build(generated_corpus, tmp_path / "cache")
    assert not entry.hit and entry.directory not in olds
    assert [{path.name: path.read_bytes() for path in old.iterdir()} for old in olds] == before


def test_second_build_is_a_hit_without_training(generated_corpus: Path, tmp_path: Path, monkeypatch) -> None:
    first = _build(generated_corpus, tmp_path / "cache")
    _forbid_training(monkeypatch)
    second = _build(generated_corpus, tmp_path / "cache")
    assert second.hit and second.directory == first.directory
    assert second.manifest == first.manifest


def test_a_first_build_says_what_it_does_and_a_hit_says_nothing(generated_corpus: Path, tmp_path: Path, capsys):
    """The seconds of training a BPE and encoding the corpus are not silent; a cached corpus starts at once."""
    first = _build(generated_corpus, tmp_path / "cache")
    said = capsys.readouterr().err
    assert said.startswith("tokenizing ") and "training its BPE tokenizer first" in said
    assert str(first.directory) in said and "once for these settings" in said
    _build(generated_corpus, tmp_path / "cache")
    assert "tokenizing" not in capsys.readouterr().err


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


def test_an_interrupted_build_is_never_read_and_the_next_run_finishes_it(
    generated_corpus: Path, tmp_path: Path, monkeypatch, recwarn
) -> None:
    clean = _build(generated_corpus, tmp_path / "clean")

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-build")

    with monkeypatch.context() as patch:
        patch.setattr(parallel_encode, "encode_texts", crash)
        with pytest.raises(RuntimeError, match="killed mid-build"):
            _build(generated_corpus, tmp_path / "cache")
    [unfinished] = [tmp_path / "cache" / name for name in _entries(tmp_path / "cache")]
    assert json.loads((unfinished / "manifest.json").read_text())["complete"] is False
    with pytest.raises(CorpusError, match="unfinished"):
        shard_dir_corpus(unfinished)
    finished = _build(generated_corpus, tmp_path / "cache")
    assert not finished.hit and finished.directory == unfinished and not recwarn.list  # finished, not "damaged"
    assert finished.train_path.read_bytes() == clean.train_path.read_bytes()
    assert finished.val_path.read_bytes() == clean.val_path.read_bytes()


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


@pytest.mark.parametrize("kind", ["text", "records"])
def test_an_entry_is_checked_and_built_under_its_lock(
    kind: str, generated_corpus: Path, tmp_path: Path, small_texts, jsonl_writer, monkeypatch
) -> None:
    held, real = [], cache.tokenize_corpus

    def tokenize(corpus, out, *rest):
        held.append(_held_elsewhere(out))
        return real(corpus, out, *rest)

    monkeypatch.setattr(cache, "tokenize_corpus", tokenize)
    source = generated_corpus if kind == "text" else jsonl_writer(tmp_path / "c.jsonl", small_texts)
    entry = _build(source, tmp_path / "cache", tokenizer_spec="byte", vocab_size=257)
    assert held == [True] and not _held_elsewhere(entry.directory)  # held while building, released after
    assert _build(source, tmp_path / "cache", tokenizer_spec="byte", vocab_size=257).hit and held == [True]


def test_a_tokenizer_that_makes_more_tokens_than_bytes_spills_into_a_second_shard(tmp_path: Path) -> None:
    """One shard per split is sized by the corpus's bytes (a byte-level token is at least one byte); a
    tokenizer.json that expands its text (here a normaliser writing each ``a`` four times) beats that
    bound. Nothing may be lost or reordered: the split spills into more shards, read back in order."""
    from tokenizers import normalizers

    expanding = tokenizers_lib.byte_tokenizer()
    expanding.normalizer = normalizers.Replace("a", "aaaa")
    tokenizer_file = tmp_path / "expanding.json"
    expanding.save(str(tokenizer_file))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    documents = [("a" * 300) + f"\n{index}\n" for index in range(8)]
    for index, text in enumerate(documents):
        (corpus / f"doc_{index}.txt").write_text(text, encoding="utf-8")

    entry = _build(corpus, tmp_path / "cache", tokenizer_spec=str(tokenizer_file), vocab_size=257)
    shards = shard_dir_corpus(entry.directory)
    assert len(shards.train) > 1, "the corpus's byte count should not have held these tokens"
    train = np.concatenate([np.asarray(read_token_file(path)) for path in shards.train])
    names = entry.manifest["train_documents"]
    eot = tokenizers_lib.eot_id(expanding)
    expected: list[int] = []
    for position, name in enumerate(names):
        expected += ([eot] if position else []) + expanding.encode((corpus / name).read_text(encoding="utf-8")).ids
    assert train.tolist() == expected and entry.manifest["totals"]["train_tokens"] == len(expected)
    bound = sum(len(text.encode()) for text in documents) + len(documents) + 1  # tokenize_corpus's shard size
    assert len(expected) > bound, "the train split alone should beat the one-shard bound"
