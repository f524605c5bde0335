"""A user's small text folder trains with the defaults: ``andrea fit`` fits the BPE to what the corpus can learn."""

from __future__ import annotations

import random

import pytest

from andrea_lab.data.cache import load_or_build
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.settings import DataConfigError
from andrea_lab.data.tokenizer import VocabularyTooLarge
from andrea_lab.fit.vocab_fit import DEFAULT_VOCAB_SIZE, FITTED_SIZES, fit_vocabulary, fitted_size


def test_the_fitted_size_is_the_largest_the_corpus_reached() -> None:
    assert FITTED_SIZES == (4353, 2305, 1281, 769)  # 256 bytes + 2^k merges + end of text
    assert fitted_size(6821) == 4353 and fitted_size(4353) == 4353 and fitted_size(4352) == 2305
    assert fitted_size(800) == 769 and fitted_size(768) is None


@pytest.fixture(scope="module")
def english_folder(tmp_path_factory):
    """A few English-like texts: a few thousand distinct pairs, fewer than the default BPE's 8192 merges."""
    rng = random.Random(0)
    words = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 8))) for _ in range(400)]
    root = tmp_path_factory.mktemp("english")
    for index in range(6):
        lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(300)]
        (root / f"text{index}.txt").write_text("\n".join(lines), encoding="utf-8")
    return root


def _section(corpus, cache, vocab_size=DEFAULT_VOCAB_SIZE):
    data = dict(corpus=str(corpus), tokenizer="bpe", val_fraction=0.2, cache_dir=str(cache), seed=1337)
    data.update(batch_size=8, block_size=32, samples_per_epoch=None, max_val_batches=None, num_workers=0)
    return {
        "model": {"config": {"vocab_size": vocab_size}},
        "data": {**data, "vocab_size": vocab_size, "text_field": "text"},
    }


def test_the_default_size_is_fitted_once_and_the_next_fit_reads_the_cache(english_folder, tmp_path) -> None:
    section = _section(english_folder, tmp_path / "cache")
    note = fit_vocabulary(section)
    size = section["model"]["config"]["vocab_size"]
    assert size in FITTED_SIZES and section["data"]["vocab_size"] == size
    assert note.startswith("tokenizer: ") and f"fitting a {size}-id BPE" in note and "it reached" in note
    assert not list((tmp_path / "cache").glob("tokens-*")), "the failed default-size build left an entry"
    load_or_build(resolve_corpus(str(english_folder)), "bpe", size, 0.2, str(tmp_path / "cache"), 1337)  # the fit's
    again = _section(english_folder, tmp_path / "cache")
    assert "cached from an earlier fit" in fit_vocabulary(again) and again["model"]["config"]["vocab_size"] == size


def test_a_size_the_user_chose_is_kept_and_still_refused_in_one_line(english_folder, tmp_path) -> None:
    section = _section(english_folder, tmp_path / "cache", vocab_size=8000)
    assert fit_vocabulary(section) is None and section["model"]["config"]["vocab_size"] == 8000
    with pytest.raises(VocabularyTooLarge, match="use vocab_size <= "):
        load_or_build(resolve_corpus(str(english_folder)), "bpe", 8000, 0.2, str(tmp_path / "cache"), 1337)
    assert not list((tmp_path / "cache").glob("tokens-*")), "a build that cannot learn its vocabulary left an entry"


def test_a_bad_data_setting_is_refused_before_any_corpus_is_read(tmp_path, monkeypatch) -> None:
    """An empty corpus name would resolve to the working directory: the data module's check comes first."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataConfigError, match="corpus must name the data, got ''"):
        fit_vocabulary(_section("", tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


def test_the_standard_library_and_other_tokenizers_are_left_alone(tmp_path) -> None:
    for corpus, tokenizer in (("stdlib", "bpe"), ("stdlib-code", "bpe")):
        section = _section(corpus, tmp_path / "cache")
        section["data"]["tokenizer"] = tokenizer
        assert fit_vocabulary(section) is None and not (tmp_path / "cache").exists()
