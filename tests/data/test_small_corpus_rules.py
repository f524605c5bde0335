"""A small text corpus through the one tokenize pipeline gives the tokens its cache entries always had.

The committed suite results (docs/results/) were measured on ``stdlib``'s entries as the earlier, separate
encoder made them: split by document name with at least one document on each side, a BPE learned on every
training document in corpus order, ``<|endoftext|>`` between the documents of a split (none after the
last), one document split by position. The first test restates that rule independently of the pipeline
and compares bytes; the second pins the stdlib split and batches those results were measured on, so a
change that would move the committed numbers fails here, loudly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from andrea_lab.data.cache import load_or_build
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.split import SplitRule, document_sides, split_documents, split_point
from andrea_lab.data.token_file import read_token_file
from andrea_lab.data.tokenizer import eot_id, load_tokenizer, train_bpe_tokenizer


def _joined(tokenizer, texts: list[str]) -> list[int]:
    """The earlier encoder's stream: each document's ids, ``<|endoftext|>`` between documents."""
    ids: list[int] = []
    for number, text in enumerate(texts):
        if number:
            ids.append(eot_id(tokenizer))
        ids.extend(tokenizer.encode(text, add_special_tokens=False).ids)
    return ids


@pytest.mark.parametrize("tokenizer", ["bpe", "byte"])
def test_a_small_corpus_entry_is_the_earlier_rule_byte_for_byte(
    tokenizer: str, generated_corpus: Path, tmp_path: Path
) -> None:
    vocab = 300 if tokenizer == "bpe" else 257
    corpus = resolve_corpus(str(generated_corpus))
    entry = load_or_build(corpus, tokenizer, vocab, 0.25, str(tmp_path / "cache"), seed=99)
    names, texts = corpus.relative_names(), [record.text for record in corpus.iter_records()]
    train, val = split_documents(names, 0.25)
    made = load_tokenizer(entry.tokenizer_path)
    if tokenizer == "bpe":  # learned on every training document, in corpus order
        assert made.to_str() == train_bpe_tokenizer([texts[i] for i in train], vocab).to_str()
    assert read_token_file(entry.train_path).tolist() == _joined(made, [texts[i] for i in train])
    assert read_token_file(entry.val_path).tolist() == _joined(made, [texts[i] for i in val])
    assert entry.manifest["val_documents"] == [names[i] for i in val]
    assert entry.manifest["settings"]["seed"] is None  # the BPE takes no sample: the seed decides nothing


def test_one_document_is_split_by_position_as_before(tmp_path: Path, make_text_corpus) -> None:
    path = make_text_corpus(tmp_path / "one", n_files=1, words_per_file=1500)[0]
    entry = load_or_build(resolve_corpus(str(path)), "byte", 257, 0.2, str(tmp_path / "cache"))
    ids = _joined(load_tokenizer(entry.tokenizer_path), [path.read_text(encoding="utf-8")])
    boundary = split_point(len(ids), 0.2)
    assert read_token_file(entry.train_path).tolist() == ids[:boundary]
    assert read_token_file(entry.val_path).tolist() == ids[boundary:]
    totals = entry.manifest["totals"]
    assert (totals["train_documents"], totals["val_documents"]) == (1, 0)  # as the earlier entries counted it
    assert entry.manifest["train_documents"] == [path.name] and entry.manifest["val_documents"] == []


# What the committed suites measured (cpu-base: stdlib, byte, block 64, batch 32, seed 0, held-out 262,144
# tokens, seed 0), recorded from the code before the pipelines became one. The stdlib is this Python's:
# another Python's library is another corpus, so the pin only applies where the fingerprint matches.
STDLIB_SHA256 = "a8e0f48c5508944b80f2b8db52e436bea24b76f34ccfd4078f651c0d250a2ac5"
VAL_NAMES_SHA256 = "c202c96a25e92f0bc21499d5d5ca9b416fd827a61c2a5c662f1b7dc5b4818b13"
TRAIN_NAMES_SHA256 = "3faee2a8b4eb84c00699798d872ae2a8ae558008f0ef3a024bdbb6defca5af83"
FIRST_BATCH = ("6095805d1c84b66d", "815cf551fdbe4f7d")
HELDOUT_SHA256 = "e33c06bafc758b029b6ba943c1b1308d3ea631f8ceeeda3e8089ba9097d46cff"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def stdlib():
    corpus = resolve_corpus("stdlib")
    if corpus.fingerprint() != STDLIB_SHA256:
        pytest.skip("this Python's standard library is not the one the committed suites were measured on")
    return corpus


def test_the_stdlib_split_is_the_one_the_committed_suites_measured(stdlib) -> None:
    names = stdlib.relative_names()
    side = document_sides(SplitRule.EACH_SIDE, 0.05, names)
    val = [name for index, name in enumerate(names) if side(index, name) == "val"]
    train = [name for index, name in enumerate(names) if side(index, name) == "train"]
    assert (len(train), len(val)) == (632, 39)
    assert _sha("\n".join(val).encode()) == VAL_NAMES_SHA256
    assert _sha("\n".join(train).encode()) == TRAIN_NAMES_SHA256


@pytest.mark.slow  # ~45 s on two shared cores: tokenizes all of stdlib
def test_the_stdlib_batches_are_the_ones_the_committed_suites_measured(stdlib, tmp_path: Path) -> None:
    from andrea_lab.data.datamodule import AndreaDataModule

    dm = AndreaDataModule(
        corpus="stdlib",
        tokenizer="byte",
        batch_size=32,
        block_size=64,
        vocab_size=257,
        seed=0,
        max_val_batches=4,
        cache_dir=str(tmp_path / "cache"),
    )
    dm.prepare_data()
    dm.setup("fit")
    assert (dm.train_tokens, dm.val_tokens) == (10_155_508, 1_199_323)
    x, y = next(iter(dm.train_dataloader()))
    assert (_sha(x.numpy().tobytes())[:16], _sha(y.numpy().tobytes())[:16]) == FIRST_BATCH
    held = dm.heldout_dataset(262_144, 0)
    digest = hashlib.sha256(held.plan.window_starts.tobytes() + held.plan.units.tobytes())
    for index in range(len(held)):
        x, y, _ = held[index]
        digest.update(x.numpy().tobytes() + y.numpy().tobytes())
    assert (len(held), held.plan.unit_count, digest.hexdigest()) == (4096, 38, HELDOUT_SHA256)
