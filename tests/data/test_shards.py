"""The data module over shard directories and globs: one stream across shards, the same sampler,
the directory's own tokenizer, ids checked up front, unfinished runs refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from andrea_lab.data import AndreaDataModule, CorpusError
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.token_file import ConcatenatedTokens, MappedTokens, write_token_file
from andrea_lab.data.tokenize_corpus import tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeOptions
from andrea_lab.files import sha256_text

OPTIONS = TokenizeOptions(vocab_size=300, sample_docs=20, val_fraction=0.2, workers=0, progress=False)


@pytest.fixture(scope="module")
def shard_dirs(tmp_path_factory, small_texts, jsonl_writer) -> tuple[Path, Path]:
    """The same corpus in many small shards and in one big one."""
    root = tmp_path_factory.mktemp("shards")
    corpus = resolve_corpus(str(jsonl_writer(root / "c.jsonl", small_texts)))
    many, one = root / "many", root / "one"
    tokenize_corpus(corpus, many, TokenizeOptions(**{**OPTIONS.__dict__, "shard_tokens": 3000}))
    tokenize_corpus(corpus, one, TokenizeOptions(**{**OPTIONS.__dict__, "shard_tokens": 10**8}))
    return many, one


def _module(corpus: Path | str, **overrides) -> AndreaDataModule:
    settings = dict(corpus=str(corpus), batch_size=4, block_size=32, vocab_size=300, seed=7)
    dm = AndreaDataModule(**{**settings, **overrides})
    dm.prepare_data()
    dm.setup()
    return dm


def test_concatenated_tokens_slice_across_shard_boundaries(tmp_path: Path) -> None:
    pieces = [np.arange(0, 5), np.arange(5, 5), np.arange(5, 12), np.arange(12, 20)]
    for i, piece in enumerate(pieces):
        write_token_file(tmp_path / f"{i}.bin", piece)
    stream = ConcatenatedTokens([MappedTokens(tmp_path / f"{i}.bin") for i in range(4)])
    assert len(stream) == 20 and stream.max() == 19
    for start, stop in ((0, 20), (3, 6), (4, 13), (5, 12), (11, 19), (7, 7)):
        assert stream[start:stop].tolist() == list(range(start, stop))


def test_batches_are_the_same_whatever_the_shard_size(shard_dirs) -> None:
    many, one = shard_dirs
    assert len(json.loads((many / "manifest.json").read_text())["shards"]) > 4
    a, b = _module(many), _module(one)
    assert a.train_tokens == b.train_tokens and a.val_tokens == b.val_tokens
    for (xa, ya), (xb, yb) in zip(list(a.train_dataloader())[:5], list(b.train_dataloader())[:5]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert [x.tolist() for x, _ in a.val_dataloader()] == [x.tolist() for x, _ in b.val_dataloader()]
    recorded = json.loads((many / "manifest.json").read_text())["tokenizer"]["sha256"]
    assert sha256_text(a.tokenizer.to_str()) == recorded and a.eot_id == 299
    assert a.provenance()["train_documents"] + a.provenance()["val_documents"] == 40
    plan = a.heldout_dataset(max_tokens=10**6, seed=0).plan
    assert plan.se_unit == "documents" and plan.unit_count > 1


def test_ids_beyond_the_vocabulary_are_refused_up_front(shard_dirs) -> None:
    with pytest.raises(CorpusError, match=r"token id 299 but vocab_size is 280.*at least 300"):
        _module(shard_dirs[0], vocab_size=280)


def test_an_unfinished_directory_says_to_rerun_tokenize(tmp_path: Path, shard_dirs) -> None:
    manifest = json.loads((shard_dirs[0] / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    with pytest.raises(CorpusError, match=r"unfinished `andrea tokenize` run.*rerun the same"):
        resolve_corpus(str(tmp_path))


def test_llm_c_style_shards_by_glob_or_directory(tmp_path: Path) -> None:
    for name, size in (("web_train_000001.bin", 900), ("web_train_000002.bin", 700), ("web_val_000000.bin", 300)):
        write_token_file(tmp_path / name, np.arange(size) % 250)
    for spec in (tmp_path, tmp_path / "web_*.bin"):
        dm = _module(spec, tokenizer="byte", vocab_size=257)
        assert (dm.train_tokens, dm.val_tokens) == (1600, 300)
    write_token_file(tmp_path / "other" / "x.bin", np.arange(10))
    with pytest.raises(CorpusError, match=r"none with 'train' in its name"):
        resolve_corpus(str(tmp_path / "other"))
