"""``andrea tokenize``'s engine: a corpus of any size into a resumable shard directory (shards.py).

1. **Settings and resume.** The output directory's manifest holds the settings that decide its
   content (corpus fingerprint, tokenizer, vocabulary, sample, seed, split, shard size). A directory
   with the same settings is resumed; one with other settings, or that is not ours, is refused:
   nothing a user has is overwritten.
2. **Tokenizer.** ``bpe`` learns a byte-level BPE on a seeded sample of ``sample_docs`` training
   documents (bottom-k of a hash of seed and key: uniform, independent of file order, one streaming
   pass holding only the sample); ``byte`` or a ``tokenizer.json`` (e.g. GPT-2's) is used as is.
3. **Encoding.** Records stream from the corpus in order; each goes to train or val by a hash of its
   key (split.py's rule, by document), bad records are counted by reason; batches are encoded by
   worker processes (parallel_encode.py) and appended, in corpus order, to the split's shard writer
   (shard_writer.py). The output is the same for any number of workers.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np
from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.corpus import Corpus, ResolvedCorpus
from andrea_lab.data.parallel_encode import available_cores, encode_ordered
from andrea_lab.data.records import PROBLEMS
from andrea_lab.data.shard_check import check_manifest
from andrea_lab.data.shard_writer import ShardWriter
from andrea_lab.data.shards import (
    MANIFEST_FILE,
    SHARD_FORMAT,
    SHARD_FORMAT_VERSION,
    SPLITS,
    TOKENIZER_FILE,
    read_manifest,
    tokenizer_entry,
)
from andrea_lab.data.split import SPLIT_VERSION, name_score, validate_val_fraction
from andrea_lab.data.tokenizer import TokenizerError
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.errors import UsageError
from andrea_lab.files import sha256_text, write_json_atomic

_BATCH_CHARS = 1 << 20   # text per job: large enough to amortise the hand-off, small enough to keep in flight
_BATCH_DOCS = 2048
_EXAMPLES = 5             # bad-record keys kept for the report


#: The smallest ``--shard-tokens``: every shard is a file, and a manifest entry rewritten with each new shard.
MIN_SHARD_TOKENS = 1024
#: The most shards a corpus may need at ``--shard-tokens`` (bounded by its size in bytes: a token is
#: at least one byte of text), so that a tiny ``--shard-tokens`` cannot ask for millions of files.
MAX_SHARDS = 10_000


def max_workers() -> int:
    """The most encoding processes ``--workers`` may ask for: more than the cores only adds memory."""
    return max(4, 2 * available_cores())


def check_shard_count(corpus: Corpus, shard_tokens: int) -> None:
    """Refuse a ``--shard-tokens`` that could split ``corpus`` into more than :data:`MAX_SHARDS` shards."""
    most = corpus.total_bytes() // shard_tokens + len(SPLITS)
    if most > MAX_SHARDS:
        least = corpus.total_bytes() // (MAX_SHARDS - len(SPLITS)) + 1
        raise TokenizeError(f"--shard-tokens {shard_tokens:,} could split this {corpus.total_bytes():,}-byte corpus "
                            f"into up to {most:,} shards (at most {MAX_SHARDS:,}); use --shard-tokens {least:,} or more")


class TokenizeError(UsageError):
    """The output directory or a setting cannot be used as asked."""


@dataclass(frozen=True)
class TokenizeOptions:
    """What ``andrea tokenize`` takes besides the corpus and the output directory.

    ``tokenizer`` may be given as its spec string; it is held parsed (:class:`TokenizerSpec`).
    """

    tokenizer: Union[str, TokenizerSpec] = "bpe"
    vocab_size: int = 8449
    sample_docs: int = 20_000
    seed: int = 1337
    val_fraction: float = 0.005
    shard_tokens: int = 100_000_000
    workers: int = field(default_factory=available_cores)
    progress: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokenizer", _parsed(self.tokenizer))

    @property
    def spec(self) -> TokenizerSpec:
        """The tokenizer, parsed (``__post_init__`` made sure)."""
        assert isinstance(self.tokenizer, TokenizerSpec)
        return self.tokenizer

    def check(self) -> None:
        """Reject settings that cannot work, naming the value and what would."""
        try:
            validate_val_fraction(self.val_fraction)
        except ValueError as error:
            raise TokenizeError(str(error)) from None
        if self.sample_docs < 1:
            raise TokenizeError(f"--sample-docs must be at least 1, got {self.sample_docs}")
        if self.shard_tokens < MIN_SHARD_TOKENS:
            raise TokenizeError(f"--shard-tokens must be at least {MIN_SHARD_TOKENS:,} (each shard is a file and a "
                                f"manifest entry; llm.c's are 100,000,000), got {self.shard_tokens}")
        if not 0 <= self.workers <= max_workers():
            raise TokenizeError(f"--workers must be 0 (encode in this process) or more, at most {max_workers()} "
                                f"(twice the {available_cores()} cores this process may use), got {self.workers}")
        try:
            self.spec.check_shard_vocab(self.vocab_size)
        except TokenizerError as error:
            raise TokenizeError(str(error)) from None


def _parsed(spec: Union[str, TokenizerSpec]) -> TokenizerSpec:
    try:
        return TokenizerSpec.of(spec)
    except TokenizerError as error:
        raise TokenizeError(str(error)) from None


@dataclass
class TokenizeReport:
    """What a run did: the final manifest, shards written now and before, bad records with examples."""

    directory: Path
    manifest: dict[str, Any]
    shards_before: int
    shards_written: int
    seconds: float
    bad_examples: dict[str, list[str]]

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))


def settings_of(corpus: Corpus, options: TokenizeOptions) -> dict[str, Any]:
    """Everything that decides the shards' content (the number of workers does not)."""
    learned = options.spec.learned
    return {
        "corpus_fingerprint": corpus.fingerprint(), "text_field": corpus.text_field,
        "tokenizer": options.spec.identity(),
        "vocab_size": options.vocab_size if learned else None,
        "sample_docs": options.sample_docs if learned else None, "seed": options.seed,
        "val_fraction": repr(float(options.val_fraction)), "shard_tokens": options.shard_tokens,
        "split_version": SPLIT_VERSION,
    }


def open_output(out: Path, corpus: Corpus, settings: dict[str, Any]) -> dict[str, Any]:
    """The manifest to continue: a fresh one for a new or empty directory, else the matching one there."""
    existing = read_manifest(out) if out.is_dir() else None
    if existing is None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise TokenizeError(f"--out {out} exists and is not an `andrea tokenize` output directory; "
                                "choose a new or empty directory (nothing there is overwritten)")
        return {"format": SHARD_FORMAT, "version": SHARD_FORMAT_VERSION, "complete": False,
                "corpus": corpus.description, "settings": settings, "tokenizer": None, "shards": []}
    check_manifest(existing, out / MANIFEST_FILE, SPLITS)
    differing = sorted(key for key in settings if existing.get("settings", {}).get(key) != settings[key])
    if differing:
        raise TokenizeError(
            f"--out {out} holds shards made with other settings ({', '.join(differing)} differ); "
            "rerun with the same corpus and options to resume it, or choose another --out"
        )
    return existing


def sample_documents(corpus: Corpus, count: int, seed: int, val_fraction: float) -> list[str]:
    """A seeded uniform sample of ``count`` training documents (bottom-k of a keyed hash), one pass."""
    heap: list[tuple[float, str, str]] = []  # (-score, key, text): the root is the largest score kept
    for record in corpus.iter_records():
        if record.text is None or name_score(record.key) < val_fraction:
            continue
        score = name_score(f"{seed}:{record.key}")
        if len(heap) < count:
            heapq.heappush(heap, (-score, record.key, record.text))
        elif score < -heap[0][0]:
            heapq.heapreplace(heap, (-score, record.key, record.text))
    return [text for _, _, text in sorted(heap, reverse=True)]


def make_tokenizer(corpus: Corpus, options: TokenizeOptions) -> Tokenizer:
    """Train the BPE on the sample, or take the byte tokenizer or a given ``tokenizer.json``."""

    def sample() -> list[str]:
        texts = sample_documents(corpus, options.sample_docs, options.seed, options.val_fraction)
        if not texts:
            raise TokenizeError(f"corpus {corpus.description} has no usable training document to learn a BPE from")
        return texts

    return options.spec.build(sample, options.vocab_size)


def ready_tokenizer(out: Path, corpus: Corpus, options: TokenizeOptions, manifest: dict[str, Any]) -> Tokenizer:
    """The run's tokenizer: the one already in ``out`` when resuming (checked by hash), else a new one."""
    path = out / TOKENIZER_FILE
    recorded = manifest.get("tokenizer")
    if recorded and path.is_file():
        tokenizer = tokenizers_lib.load_tokenizer(path)
        if sha256_text(tokenizer.to_str()) == recorded["sha256"]:
            return tokenizer
    tokenizer = make_tokenizer(corpus, options)
    tokenizers_lib.save_tokenizer(tokenizer, path)
    manifest["tokenizer"] = tokenizer_entry(tokenizer)
    manifest["shards"] = []  # shards of another tokenizer (never expected) are not continued
    write_json_atomic(out / MANIFEST_FILE, manifest)
    return tokenizer


@dataclass
class _Run:
    """The state of one encoding pass: writers, bad-record counts, progress figures."""

    writers: dict[str, ShardWriter]
    bad: Counter
    examples: dict[str, list[str]] = field(default_factory=dict)
    documents: int = 0
    tokens: int = 0
    records: int = 0


def tokenize_corpus(corpus: ResolvedCorpus, out: Path, options: TokenizeOptions) -> TokenizeReport:
    """Tokenize ``corpus`` into shards in ``out`` (resuming what is there); see the module docstring."""
    if not isinstance(corpus, Corpus):
        raise TokenizeError(f"the corpus is already token ids ({corpus.description}): train on it as it is "
                            f"(--data.corpus {corpus.root if corpus.manifest else corpus.train[0]}); `andrea tokenize` "
                            "takes text (stdlib, text files, JSONL/Parquet records, a datasets directory)")
    options.check()
    check_shard_count(corpus, options.shard_tokens)
    started = time.perf_counter()
    manifest = open_output(out, corpus, settings_of(corpus, options))
    before = len(manifest["shards"])
    if manifest["complete"]:
        return TokenizeReport(out, manifest, before, 0, time.perf_counter() - started, {})
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = ready_tokenizer(out, corpus, options, manifest)

    def on_shard(record: dict[str, Any]) -> None:
        manifest["shards"].append(record)
        write_json_atomic(out / MANIFEST_FILE, manifest)

    run = _resumed_run(out, manifest, options.shard_tokens, on_shard)
    start = min(writer.resume_record for writer in run.writers.values())
    _encode_corpus(corpus, tokenizer, run, start, options)
    for writer in run.writers.values():
        writer.finish(run.records, dict(run.bad))
    manifest["complete"] = True
    manifest["totals"] = _totals(manifest, run)
    write_json_atomic(out / MANIFEST_FILE, manifest)
    written = len(manifest["shards"]) - before
    return TokenizeReport(out, manifest, before, written, time.perf_counter() - started, run.examples)


def _resumed_run(out: Path, manifest: dict[str, Any], shard_tokens: int, on_shard: Any) -> _Run:
    """Writers positioned after each split's finished shards; bad counts up to the earliest of them."""
    writers, bad = {}, Counter()
    earliest: Optional[dict[str, Any]] = None
    for split in SPLITS:
        writer = ShardWriter(out, split, shard_tokens, on_shard)
        done = [shard for shard in manifest["shards"] if shard["split"] == split]
        if done:
            last = done[-1]
            writer.next_index = last["index"] + 1
            writer.resume_record, writer.resume_carry = last["end"]["record"], last["end"]["carry"]
            writer.tokens_written = sum(shard["tokens"] for shard in done)
        if earliest is None or writer.resume_record < earliest["record"]:
            earliest = {"record": writer.resume_record, "bad": last["bad_records_before_end"] if done else {}}
        writers[split] = writer
    bad.update(earliest["bad"] if earliest else {})
    return _Run(writers, bad)


def _jobs(corpus: Corpus, run: _Run, start: int, val_fraction: float) -> Iterator[tuple[Any, list[str]]]:
    """Batches of ``(tag, texts)``; the tag lists every record in the batch (``index, split, problem``)
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
            split = "val" if name_score(record.key) < val_fraction else "train"
            if not run.writers[split].wants(index):
                continue
            entries.append((index, split, None))
            texts.append(record.text)
            chars += len(record.text)
        if chars >= _BATCH_CHARS or len(entries) >= _BATCH_DOCS:
            yield (entries, record.position), texts
            entries, texts, chars = [], [], 0
    run.records = index + 1
    if entries:
        yield (entries, corpus.total_bytes()), texts


def _remember(run: _Run, problem: str, key: str) -> None:
    examples = run.examples.setdefault(problem, [])
    if len(examples) < _EXAMPLES:
        examples.append(key)


def _encode_corpus(corpus: Corpus, tokenizer: Tokenizer, run: _Run, start: int, options: TokenizeOptions) -> None:
    """Apply every encoded batch, in order, to the shard writers; the progress bar follows the input bytes."""
    from tqdm.auto import tqdm

    bar = tqdm(total=corpus.total_bytes(), unit="B", unit_scale=True, desc="tokenize",
               disable=not options.progress, dynamic_ncols=True)
    began = time.perf_counter()
    try:
        jobs = _jobs(corpus, run, start, options.val_fraction)
        for (entries, position), ids, lengths in encode_ordered(tokenizer, jobs, options.workers):
            _apply(run, entries, ids, lengths)
            bar.update(position - bar.n)
            rate = run.tokens / max(time.perf_counter() - began, 1e-9)
            bar.set_postfix(docs=f"{run.documents:,}", tok_s=f"{rate:,.0f}", refresh=False)
    finally:
        bar.close()


def _apply(run: _Run, entries: list, ids: np.ndarray, lengths: np.ndarray) -> None:
    ends = np.cumsum(lengths)
    text_number = 0
    for index, split, problem in entries:
        if problem is not None:
            run.bad[problem] += 1
            continue
        end = int(ends[text_number])
        tokens = ids[end - int(lengths[text_number]):end]
        text_number += 1
        run.writers[split].add(index, tokens, run.bad)  # a closing shard snapshots it
        run.documents += 1
        run.tokens += len(tokens)


def _totals(manifest: dict[str, Any], run: _Run) -> dict[str, Any]:
    totals: dict[str, Any] = {"records": run.records, "bad_records": {p: run.bad[p] for p in PROBLEMS if run.bad[p]}}
    for split in SPLITS:
        shards = [shard for shard in manifest["shards"] if shard["split"] == split]
        totals[f"{split}_shards"] = len(shards)
        totals[f"{split}_tokens"] = sum(shard["tokens"] for shard in shards)
        totals[f"{split}_documents"] = sum(shard["documents"] for shard in shards)
    return totals
