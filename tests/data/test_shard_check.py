"""Shards are checked against their manifest and the vocabulary on the data itself (shard_check): a
rewritten shard is refused naming it, a malformed manifest is one error, every shard is read once per
process, and the corpus hash a run records is over the hashes read from the shards."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data import AndreaDataModule, CorpusError, shard_check
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.token_file import HEADER_BYTES
from andrea_lab.data.tokenize_corpus import tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeOptions

OPTIONS = TokenizeOptions(tokenizer="byte", val_fraction=0.3, shard_tokens=4000, workers=0, progress=False)


@pytest.fixture(scope="module")
def shards(tmp_path_factory, small_texts, jsonl_writer) -> Path:
    root = tmp_path_factory.mktemp("checked")
    tokenize_corpus(resolve_corpus(str(jsonl_writer(root / "c.jsonl", small_texts))), root / "shards", OPTIONS)
    return root / "shards"


@pytest.fixture
def copy(shards, tmp_path) -> Path:
    shard_check._SCANNED.clear()
    return Path(shutil.copytree(shards, tmp_path / "copy"))


def _first_shard(directory: Path) -> Path:
    return directory / json.loads((directory / "manifest.json").read_text())["shards"][0]["file"]


def _set_id(path: Path, index: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    ids = np.frombuffer(bytes(raw[HEADER_BYTES:]), dtype="<u2").copy()
    ids[index] = value
    raw[HEADER_BYTES:] = ids.tobytes()
    path.write_bytes(bytes(raw))  # the same size: only the content says it changed


def _fit_data(corpus: Path, vocab_size: int = 257) -> AndreaDataModule:
    dm = AndreaDataModule(corpus=str(corpus), tokenizer="byte", batch_size=2, block_size=16, vocab_size=vocab_size)
    dm.prepare_data()
    dm.setup()
    return dm


@pytest.mark.parametrize("new_id", [9000, 65], ids=["beyond-vocab", "inside-vocab"])
def test_a_shard_rewritten_after_tokenize_is_refused_naming_it(copy, new_id):
    shard = _first_shard(copy)
    _set_id(shard, 5, new_id)
    with pytest.raises(CorpusError, match=rf"shard {shard} has sha256 .* but its manifest says"):
        _fit_data(copy)


def test_ids_are_checked_on_the_data_even_when_the_manifest_agrees(copy):
    """A manifest rewritten to match a shard with an id beyond the vocabulary: the data says so, not an IndexError."""
    shard = _first_shard(copy)
    _set_id(shard, 5, 9000)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match=rf"token file {shard} contains token id 9000 but vocab_size is 257"):
        _fit_data(copy)


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: m.pop("shards"),
        lambda m: m.update(shards={"a": 1}),
        lambda m: m["shards"][0].update(bytes="many"),
        lambda m: m["shards"][0].update(file="../elsewhere.bin"),
        lambda m: m["shards"][0].update(split="test"),
        lambda m: m["shards"].__setitem__(0, "train_000000.bin"),
        lambda m: m.update(totals=[1]),
    ],
    ids=[
        "no-shards",
        "shards-a-mapping",
        "bytes-a-string",
        "file-outside",
        "unknown-split",
        "entry-a-string",
        "totals-a-list",
    ],
)
def test_a_malformed_manifest_is_one_error(copy, damage):
    manifest = json.loads((copy / "manifest.json").read_text())
    damage(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match=r"manifest.json.*(damaged|not what)"):
        resolve_corpus(str(copy))


def test_each_shard_is_read_once_per_process(copy, monkeypatch):
    reads: list[str] = []
    real = shard_check.header_token_count
    monkeypatch.setattr(
        shard_check,
        "header_token_count",
        lambda raw, size, path: reads.append(Path(path).name) or real(raw, size, path),
    )
    dm = _fit_data(copy)
    dm.provenance()
    _fit_data(copy).provenance()
    names = [shard["file"] for shard in json.loads((copy / "manifest.json").read_text())["shards"]]
    assert sorted(reads) == sorted(names)


def test_the_run_records_the_hashes_read_from_the_shards(copy):
    manifest = json.loads((copy / "manifest.json").read_text())
    digest = hashlib.sha256(b"shards\0")
    for shard in manifest["shards"]:
        digest.update(f"{shard['file']}\0{hashlib.sha256((copy / shard['file']).read_bytes()).hexdigest()}\0".encode())
    assert _fit_data(copy).provenance()["corpus_sha256"] == digest.hexdigest()
