"""A small text corpus through the one tokenize pipeline gives the tokens its cache entries always had.

The committed suite results (docs/results/, before 2026-12-03) were measured on ``stdlib``'s entries as the
earlier, separate encoder made them: split by document name with at least one document on each side (split
version 1), a BPE learned on every training document in corpus order, ``<|endoftext|>`` between the
documents of a split (none after the last), one document split by position. Split version 2 (today's) hashes
each document's near-duplicate family instead of its name (andrea_lab.data.families); the rest is unchanged.
The first test restates that rule independently of the pipeline and compares bytes; the next pin the
version-1 split the committed results were measured on and the version-2 split and batches that runs make
now, so a change that would move either fails here, loudly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from andrea_lab.data.cache import load_or_build
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.families import family_names
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
    train, val = split_documents(names, 0.25, family_names(names, [text.encode() for text in texts]))
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


# The split the committed suites measured (split version 1, by document name), recorded from the code before
# the pipelines became one. The stdlib is this Python's: another Python's library is another corpus, so the
# pins only apply where the fingerprint matches.
STDLIB_SHA256 = "a8e0f48c5508944b80f2b8db52e436bea24b76f34ccfd4078f651c0d250a2ac5"
VAL_NAMES_SHA256 = "c202c96a25e92f0bc21499d5d5ca9b416fd827a61c2a5c662f1b7dc5b4818b13"
TRAIN_NAMES_SHA256 = "3faee2a8b4eb84c00699798d872ae2a8ae558008f0ef3a024bdbb6defca5af83"
# Split version 2 (by near-duplicate family) and what a run on it sees (cpu-base: stdlib, byte, block 64,
# batch 32, seed 0, held-out 262,144 tokens, seed 0).
FAMILY_VAL_NAMES_SHA256 = "aee8a22b1c4778c1a73b728cb8a0ad7f8bf50e289b649d796fbda97a647d17b5"
FAMILY_TRAIN_NAMES_SHA256 = "3b93461d024df3a087683965205d87c76926bc48c82d66db1d4ff46432f5ad03"
FIRST_BATCH = ("b3066a253a0bf3b0", "083acfe56914a768")
HELDOUT_SHA256 = "f0b9f63682ebb95078d620df7a7dcf995cc82be3490e3486fc040838633c13fa"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def stdlib():
    corpus = resolve_corpus("stdlib")
    if corpus.fingerprint() != STDLIB_SHA256:
        pytest.skip("this Python's standard library is not the one the committed suites were measured on")
    return corpus


def _sides(names: list[str], families=None) -> tuple[list[str], list[str]]:
    side = document_sides(SplitRule.EACH_SIDE, 0.05, names, families)
    train = [name for index, name in enumerate(names) if side(index, name) == "train"]
    return train, [name for index, name in enumerate(names) if side(index, name) == "val"]


def test_the_stdlib_split_by_name_is_the_one_the_committed_suites_measured(stdlib) -> None:
    train, val = _sides(stdlib.relative_names())
    assert (len(train), len(val)) == (632, 39)
    assert _sha("\n".join(val).encode()) == VAL_NAMES_SHA256
    assert _sha("\n".join(train).encode()) == TRAIN_NAMES_SHA256


def test_the_stdlib_split_by_family_is_pinned(stdlib) -> None:
    names = stdlib.relative_names()
    train, val = _sides(names, family_names(names, [path.read_bytes() for path in stdlib.files]))
    assert (len(train), len(val)) == (638, 33)
    assert _sha("\n".join(val).encode()) == FAMILY_VAL_NAMES_SHA256
    assert _sha("\n".join(train).encode()) == FAMILY_TRAIN_NAMES_SHA256


@pytest.mark.slow  # ~45 s on two shared cores: tokenizes all of stdlib
def test_the_stdlib_batches_are_pinned(stdlib, tmp_path: Path) -> None:
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
    assert (dm.train_tokens, dm.val_tokens) == (10_230_026, 1_124_805)
    x, y = next(iter(dm.train_dataloader()))
    assert (_sha(x.numpy().tobytes())[:16], _sha(y.numpy().tobytes())[:16]) == FIRST_BATCH
    held = dm.heldout_dataset(262_144, 0)
    digest = hashlib.sha256(held.plan.window_starts.tobytes() + held.plan.units.tobytes())
    for index in range(len(held)):
        x, y, _ = held[index]
        digest.update(x.numpy().tobytes() + y.numpy().tobytes())
    assert (len(held), held.plan.unit_count, digest.hexdigest()) == (4096, 32, HELDOUT_SHA256)
