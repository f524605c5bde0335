"""The one tokenize pipeline: every corpus that is text becomes token shards here (shards.py).

``andrea tokenize`` runs it into a directory the user names; the data module runs it into its cache
(cache.py) for a text file, a directory, a glob, ``stdlib`` or record files. One record stream in
(``Corpus.iter_records``), one encoder (parallel_encode.py), one shard writer (shard_writer.py), one
manifest out. Where corpora need different rules, the rule is a typed field of
:class:`TokenizeOptions`, recorded in the manifest's settings, never a second code path:

* ``split`` (:class:`~andrea_lab.data.split.SplitRule`): by a hash of each record's key, streaming
  (records), or over all document names with at least one document on each side, one document by
  position (small text corpora: the split those always had);
* ``sample_docs``: the BPE learns on a seeded uniform sample of that many training documents
  (bottom-k of a hash of seed and key, one streaming pass), or, with None, on every training
  document in corpus order (small corpora: the seed then decides nothing and is not in the settings);
* ``end_of_text`` (:class:`EndOfText`): ``<|endoftext|>`` after every document, or only between the
  documents of a split (small corpora);
* ``shard_tokens``: tokens per shard, or None for one shard per split (small corpora).

The settings that decide the content (corpus fingerprint, tokenizer, these rules) are the output's
manifest's; a directory with the same settings is resumed, one with others is refused. The output is
the same for any number of workers.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.corpus import Corpus, ResolvedCorpus, read_document
from andrea_lab.data.families import family_names, window_overlap
from andrea_lab.data.parallel_encode import encode_ordered
from andrea_lab.data.records import PROBLEMS
from andrea_lab.data.shard_check import check_manifest
from andrea_lab.data.shard_writer import ShardWriter, resumed_writers
from andrea_lab.data.shards import (
    MANIFEST_FILE,
    SHARD_FORMAT,
    SHARD_FORMAT_VERSION,
    SPLITS,
    TOKENIZER_FILE,
    read_manifest,
    tokenizer_entry,
)
from andrea_lab.data.split import BOTH, TRAIN, VAL, SplitRule, document_sides, name_score, split_point, split_version_of
from andrea_lab.data.strata import stratum_of
from andrea_lab.data.tokenize_options import (
    EndOfText,
    TokenizeError,
    TokenizeOptions,
    TokenizeReport,
    check_shard_count,
)
from andrea_lab.files import sha256_text, write_json_atomic

_BATCH_CHARS = 1 << 20  # text per job: large enough to amortise the hand-off, small enough to keep in flight
_BATCH_DOCS = 2048
_EXAMPLES = 5  # bad-record keys kept for the report
#: ``side(index, key)``: where a record goes (split.document_sides).
Side = Callable[[int, str], str]


#: A corpus of editions (Corpus.editions) is split by families that also fold spellings (families.py).
EDITION_FAMILIES = "line windows and spelling-folded word 3-grams"
#: The rules of every manifest written before they were settings: an old output directory resumes as itself.
_EARLIER_RULES = {"split": SplitRule.BY_KEY.value, "end_of_text": EndOfText.AFTER_EACH.value}


def settings_of(corpus: Corpus, options: TokenizeOptions) -> dict[str, Any]:
    """Everything that decides the shards' content (the number of workers does not): the manifest's
    ``settings``, and what the cache key hashes (the one definition of both)."""
    learned, sampled = options.spec.learned, options.sample_docs is not None
    return {
        "corpus_fingerprint": corpus.fingerprint(),
        "text_field": corpus.text_field,
        "tokenizer": options.spec.identity(),
        "vocab_size": options.vocab_size if learned else None,
        "sample_docs": options.sample_docs if learned and sampled else None,
        "seed": options.seed if sampled else None,
        "val_fraction": repr(float(options.val_fraction)),
        "shard_tokens": options.shard_tokens,
        "split_version": split_version_of(options.split),
        "split": options.split.value,
        "end_of_text": options.end_of_text.value,
        **({"families": EDITION_FAMILIES} if corpus.editions else {}),  # absent elsewhere: their keys stay
    }


def open_output(out: Path, corpus: Corpus, settings: dict[str, Any]) -> dict[str, Any]:
    """The manifest to continue: a fresh one for a new or empty directory, else the matching one there."""
    existing = read_manifest(out) if out.is_dir() else None
    if existing is None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise TokenizeError(
                f"--out {out} exists and is not an `andrea tokenize` output directory; "
                "choose a new or empty directory (nothing there is overwritten)"
            )
        return {
            "format": SHARD_FORMAT,
            "version": SHARD_FORMAT_VERSION,
            "complete": False,
            "corpus": corpus.description,
            "corpus_bytes": corpus.total_bytes(),
            "settings": settings,
            "tokenizer": None,
            "shards": [],
        }
    check_manifest(existing, out / MANIFEST_FILE, SPLITS)
    recorded = {**_EARLIER_RULES, **existing.get("settings", {})}
    differing = sorted(key for key in settings if recorded.get(key) != settings[key])
    if differing:
        raise TokenizeError(
            f"--out {out} holds shards made with other settings ({', '.join(differing)} differ); "
            "rerun with the same corpus and options to resume it, or choose another --out"
        )
    return existing


def training_documents(corpus: Corpus, options: TokenizeOptions, side: Side) -> Iterable[str]:
    """What a BPE learns on: every training document in corpus order (``sample_docs`` None), else a seeded
    uniform sample of ``sample_docs`` of them (bottom-k of a keyed hash), one pass holding only the sample."""
    training = (
        (record.key, record.text)
        for index, record in enumerate(corpus.iter_records())
        if record.text is not None and side(index, record.key) != VAL
    )
    if options.sample_docs is None:
        return (text for _, text in training)
    heap: list[tuple[float, str, str]] = []  # (-score, key, text): the root is the largest score kept
    for key, text in training:
        score = name_score(f"{options.seed}:{key}")
        if len(heap) < options.sample_docs:
            heapq.heappush(heap, (-score, key, text))
        elif score < -heap[0][0]:
            heapq.heapreplace(heap, (-score, key, text))
    return [text for _, _, text in sorted(heap, reverse=True)]


def make_tokenizer(corpus: Corpus, options: TokenizeOptions, side: Optional[Side] = None) -> Tokenizer:
    """Train the BPE on the training documents (``training_documents``; ``side`` is the split, made from
    the options when not given), or take the byte tokenizer or a given ``tokenizer.json``."""
    side = side or _sides(corpus, options)

    def documents() -> Iterable[str]:
        texts = training_documents(corpus, options, side)
        if isinstance(texts, list) and not texts:
            raise TokenizeError(f"corpus {corpus.description} has no usable training document to learn a BPE from")
        return texts

    return options.spec.build(documents, options.vocab_size)


def ready_tokenizer(
    out: Path, corpus: Corpus, options: TokenizeOptions, manifest: dict[str, Any], side: Side
) -> Tokenizer:
    """The run's tokenizer: the one already in ``out`` when resuming (checked by hash), else a new one."""
    path = out / TOKENIZER_FILE
    recorded = manifest.get("tokenizer")
    if recorded and path.is_file():
        tokenizer = tokenizers_lib.load_tokenizer(path)
        if sha256_text(tokenizer.to_str()) == recorded["sha256"]:
            return tokenizer
    tokenizer = make_tokenizer(corpus, options, side)
    tokenizers_lib.save_tokenizer(tokenizer, path)
    manifest["tokenizer"] = tokenizer_entry(tokenizer)
    manifest["shards"] = []  # shards of another tokenizer (never expected) are not continued
    write_json_atomic(out / MANIFEST_FILE, manifest)
    return tokenizer


@dataclass
class _Run:
    """The state of one encoding pass: the split rule, writers, bad-record counts, progress figures."""

    side: Side
    options: TokenizeOptions
    eot: int
    writers: dict[str, ShardWriter]
    bad: Counter
    examples: dict[str, list[str]] = field(default_factory=dict)
    documents: int = 0
    tokens: int = 0
    records: int = 0


def tokenize_corpus(
    corpus: ResolvedCorpus, out: Path, options: TokenizeOptions, settings: Optional[dict[str, Any]] = None
) -> TokenizeReport:
    """Tokenize ``corpus`` into shards in ``out`` (resuming what is there); see the module docstring.
    ``settings`` is ``settings_of(corpus, options)`` when the caller has it already (the cache's key)."""
    corpus = _text_source(corpus, options)
    started = time.perf_counter()
    manifest = open_output(out, corpus, settings or settings_of(corpus, options))
    before = len(manifest["shards"])
    if manifest["complete"]:
        return TokenizeReport(out, manifest, before, 0, time.perf_counter() - started, {})
    out.mkdir(parents=True, exist_ok=True)
    side = _sides(corpus, options)
    tokenizer = ready_tokenizer(out, corpus, options, manifest, side)

    def on_shard(record: dict[str, Any]) -> None:
        manifest["shards"].append(record)
        write_json_atomic(out / MANIFEST_FILE, manifest)

    writers, bad = resumed_writers(out, manifest["shards"], options.shard_size(corpus), on_shard)
    run = _Run(side, options, tokenizers_lib.eot_id(tokenizer), writers, bad)
    _encode_corpus(corpus, tokenizer, run, min(writer.resume_record for writer in writers.values()))
    for writer in run.writers.values():
        writer.finish(run.records, dict(run.bad))
    manifest.update(complete=True, totals=_totals(manifest, run))
    if options.split is SplitRule.EACH_SIDE:  # a split decided over the names: the documents on each side
        manifest.update(_split_record(corpus, side))
    write_json_atomic(out / MANIFEST_FILE, manifest)
    written = len(manifest["shards"]) - before
    return TokenizeReport(out, manifest, before, written, time.perf_counter() - started, run.examples)


def _sides(corpus: Corpus, options: TokenizeOptions) -> Side:
    if options.split is not SplitRule.EACH_SIDE:
        return document_sides(options.split, options.val_fraction, [])
    names = corpus.relative_names()
    families = family_names(names, (path.read_bytes() for path in corpus.files), editions=corpus.editions)
    return document_sides(options.split, options.val_fraction, names, families)


def _split_record(corpus: Corpus, side: Side) -> dict[str, Any]:
    """The manifest's account of a split over all documents: the documents on each side, each held-out
    document's stratum (strata.stratum_of), and the share of the held-out side's line-start windows found
    verbatim in training (families.window_overlap)."""
    names = corpus.relative_names()
    sides = [side(index, name) for index, name in enumerate(names)]
    held_out = [path for path, where in zip(corpus.files, sides) if where == VAL]
    training = [path for path, where in zip(corpus.files, sides) if where != VAL]
    val_names = [name for name, where in zip(names, sides) if where == VAL]
    return {
        "train_documents": [name for name, where in zip(names, sides) if where != VAL],
        "val_documents": val_names,
        "val_strata": [stratum_of(name, read_document(path)) for name, path in zip(val_names, held_out)],
        "val_window_overlap": window_overlap((p.read_bytes() for p in held_out), (p.read_bytes() for p in training)),
    }


def _text_source(corpus: ResolvedCorpus, options: TokenizeOptions) -> Corpus:
    """The corpus as a text source the options can tokenize, or one error saying why not."""
    if not isinstance(corpus, Corpus):
        raise TokenizeError(
            f"the corpus is already token ids ({corpus.description}): train on it as it is "
            f"(--data.corpus {corpus.root if corpus.manifest else corpus.train[0]}); `andrea tokenize` "
            "takes text (stdlib, text files, JSONL/Parquet records, a datasets directory)"
        )
    options.check()
    if options.split is SplitRule.EACH_SIDE and corpus.is_records:
        raise TokenizeError(
            f"split {options.split.value!r} decides over every document name at once; "
            f"{corpus.description} is records: split them {SplitRule.BY_KEY.value!r}"
        )
    check_shard_count(corpus, options.shard_size(corpus))
    return corpus


def _jobs(corpus: Corpus, run: _Run, start: int) -> Iterator[tuple[Any, list[str]]]:
    """Batches of ``(tag, texts)``; the tag lists every record in the batch (``index, side, problem``)
    and the input position reached, so results are applied in corpus order."""
    entries: list[tuple[int, Optional[str], Optional[str]]] = []
    texts: list[str] = []
    chars = 0
    index = -1
    for index, record in enumerate(corpus.iter_records()):
        if index < start:
            continue
        if record.text is None:
            entries.append((index, None, record.problem or "empty"))
            _remember(run, record.problem or "empty", record.key)
        else:
            side = run.side(index, record.key)
            if not any(run.writers[split].wants(index) for split in _splits_of(side)):
                continue
            entries.append((index, side, None))
            texts.append(record.text)
            chars += len(record.text)
        if chars >= _BATCH_CHARS or len(entries) >= _BATCH_DOCS:
            yield (entries, record.position), texts
            entries, texts, chars = [], [], 0
    run.records = index + 1
    if entries:
        yield (entries, corpus.total_bytes()), texts


def _splits_of(side: str) -> tuple[str, ...]:
    return SPLITS if side == BOTH else (side,)


def _remember(run: _Run, problem: str, key: str) -> None:
    examples = run.examples.setdefault(problem, [])
    if len(examples) < _EXAMPLES:
        examples.append(key)


def _encode_corpus(corpus: Corpus, tokenizer: Tokenizer, run: _Run, start: int) -> None:
    """Apply every encoded batch, in order, to the shard writers; the progress bar follows the input bytes."""
    from tqdm.auto import tqdm

    bar = tqdm(
        total=corpus.total_bytes(),
        unit="B",
        unit_scale=True,
        desc="tokenize",
        disable=not run.options.progress,
        dynamic_ncols=True,
    )
    began = time.perf_counter()
    try:
        for (entries, position), ids, lengths in encode_ordered(
            tokenizer, _jobs(corpus, run, start), run.options.workers
        ):
            _apply(run, entries, ids, lengths)
            bar.update(position - bar.n)
            rate = run.tokens / max(time.perf_counter() - began, 1e-9)
            bar.set_postfix(docs=f"{run.documents:,}", tok_s=f"{rate:,.0f}", refresh=False)
    finally:
        bar.close()


def _apply(run: _Run, entries: list, ids: np.ndarray, lengths: np.ndarray) -> None:
    ends = np.cumsum(lengths)
    text_number = 0
    for index, side, problem in entries:
        if problem is not None:
            run.bad[problem] += 1
            continue
        end = int(ends[text_number])
        tokens = ids[end - int(lengths[text_number]) : end]  # the document's ids, then <|endoftext|>
        text_number += 1
        _place(run, index, side, tokens)
        run.documents += 1
        run.tokens += len(tokens)


def _place(run: _Run, index: int, side: str, tokens: np.ndarray) -> None:
    """One document's tokens to its split's writer (a ``BOTH`` document: its head to train, the last
    ``val_fraction`` of it to validation), ``<|endoftext|>`` where the options put it."""
    between = run.options.end_of_text is EndOfText.BETWEEN
    if between:
        tokens = tokens[:-1]
    parts = [(side, tokens)]
    if side == BOTH:
        boundary = split_point(len(tokens), run.options.val_fraction)
        parts = [(TRAIN, tokens[:boundary]), (VAL, tokens[boundary:])]
    for split, part in parts:
        writer = run.writers[split]
        if not writer.wants(index):
            continue
        if between and writer.has_tokens:  # one shard per split (check()): no resume starts mid-split
            part = np.concatenate([np.array([run.eot], dtype=part.dtype), part])
        writer.add(
            index, part, run.bad, starts_document=split == TRAIN or side != BOTH
        )  # a closing shard snapshots bad


def _totals(manifest: dict[str, Any], run: _Run) -> dict[str, Any]:
    totals: dict[str, Any] = {"records": run.records, "bad_records": {p: run.bad[p] for p in PROBLEMS if run.bad[p]}}
    for split in SPLITS:
        shards = [shard for shard in manifest["shards"] if shard["split"] == split]
        totals[f"{split}_shards"] = len(shards)
        totals[f"{split}_tokens"] = sum(shard["tokens"] for shard in shards)
        totals[f"{split}_documents"] = sum(shard["documents"] for shard in shards)
    return totals
