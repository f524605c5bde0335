"""A user's own small text folder trains with the defaults: the BPE is fitted to what the corpus can learn.

ANDREA's default vocabulary (8449 ids: 256 bytes, 8192 merges, end of text) needs a corpus with that many
distinct pairs to merge; a folder of a few English texts has fewer, and the BPE trainer stops short. Rather
than fail a first fit on one's own text, ``andrea fit`` then takes the largest of :data:`FITTED_SIZES` the corpus
reached, says so on one line, and records it in the run's config (a rerun of its config.yaml asks for that
size). It is decided before the model is built, since the model's embedding has one row per id.

Only where the user did not choose: the default size, a BPE tokenizer, a text corpus of the user's own (the
standard library and the named corpora reach 8449). A size the user set keeps the one-line error that says
which size the corpus supports.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from andrea_lab.data.cache import has_entry, load_or_build
from andrea_lab.data.corpus import STDLIB_CORPORA, Corpus, resolve_corpus
from andrea_lab.data.named_corpora import NAMED_CORPORA
from andrea_lab.data.settings import DataSettings
from andrea_lab.data.tokenizer import VocabularyTooLarge
from andrea_lab.model.config import AndreaConfig

#: The sizes a fitted BPE takes, largest first: 256 bytes + 2^k merges + end of text (the default: 2^13 merges).
FITTED_SIZES = tuple(257 + 2**merges for merges in (12, 11, 10, 9))
DEFAULT_VOCAB_SIZE = AndreaConfig.vocab_size


def fitted_size(reached: int) -> Optional[int]:
    """The largest of :data:`FITTED_SIZES` a corpus that reached ``reached`` ids can learn, else None."""
    return next((size for size in FITTED_SIZES if size <= reached), None)


def _own_text_corpus(data: Any) -> Optional[Corpus]:
    spec = str(data.get("corpus"))
    if spec in STDLIB_CORPORA or spec in NAMED_CORPORA:
        return None
    corpus = resolve_corpus(spec, text_field=data.get("text_field") or "text", cache_dir=data.get("cache_dir"))
    return corpus if isinstance(corpus, Corpus) and corpus.source is None else None


def fit_vocabulary(section: Any) -> Optional[str]:
    """For ``andrea fit``'s parsed ``section``: set a fitted vocabulary size where the default one cannot be
    learned (model and data alike) and return the line that says so; None where nothing changed. Training the
    BPE here builds the tokenized cache the fit then reads (same settings, same cache entry)."""
    model_config, data = section["model"]["config"], section["data"]
    if model_config.get("vocab_size") != DEFAULT_VOCAB_SIZE or data.get("tokenizer") != "bpe":
        return None
    # The data module's own checks first: an empty corpus name would resolve to the working directory.
    DataSettings.of(**{item.name: data.get(item.name) for item in dataclasses.fields(DataSettings)})
    if (corpus := _own_text_corpus(data)) is None:
        return None
    settings = (data.get("val_fraction"), data.get("cache_dir"), data.get("seed"))
    if has_entry(corpus, "bpe", DEFAULT_VOCAB_SIZE, *settings):
        return None
    # A fitted size cached by an earlier fit: the default failed then (a failure leaves no entry) and would now.
    cached = next((size for size in FITTED_SIZES if has_entry(corpus, "bpe", size, *settings)), None)
    reached = None
    if cached is None:
        try:
            load_or_build(corpus, "bpe", DEFAULT_VOCAB_SIZE, *settings)
            return None
        except VocabularyTooLarge as too_large:
            reached, cached = too_large.reached, fitted_size(too_large.reached)
            if cached is None:
                raise
    model_config["vocab_size"] = data["vocab_size"] = cached
    why = f"it reached {reached} ids" if reached is not None else f"a {cached}-id BPE is cached from an earlier fit"
    return (
        f"tokenizer: {corpus.description} is too small for the default {DEFAULT_VOCAB_SIZE}-id BPE ({why}): "
        f"fitting a {cached}-id BPE instead, recorded in the run's config (choose another with "
        "--model.config.vocab_size N)"
    )
