"""Documents out of record files: JSONL (plain, ``.gz``, ``.zst``), Parquet, and Hugging Face ``datasets``
directories, streamed one record at a time.

Real pretraining corpora ship millions of documents per file, one document per record, so a corpus
of this kind is read as a stream: a reader holds one line (JSONL) or one batch of rows (Parquet,
Arrow) at a time, and the memory of a pass does not grow with the corpus. Every reader yields
:class:`Record` objects carrying

* ``key``: ``<file name relative to the corpus root>:<record number>``, the document's identity (the
  train/val split hashes it, so re-ordering or adding files never moves a document across the split);
* ``text``, or ``problem`` when the record cannot be a document (not UTF-8, not JSON, missing or
  non-string field, empty): bad records are counted by the caller, never fatal and never silent;
* ``position``: the input bytes consumed so far in this file, for a progress bar with an ETA.

Parquet and ``.zst`` need ``pyarrow`` / ``zstandard`` and a datasets directory needs ``datasets``:
the ``corpora`` extra (see docs/data.md for why they are optional). A missing one is a ``UsageError``
naming the install command, raised before any work starts.
"""

from __future__ import annotations

import gzip
import importlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional

from andrea_lab.errors import UsageError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
RECORD_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES
EXTRA_HINT = "pip install -e '.[corpora]'"
_ROWS_PER_BATCH = 1024

#: The reasons a record is not a document, as counted and reported.
PROBLEMS = ("not UTF-8", "not JSON", "missing field", "not a string", "empty")


class RecordFormatError(UsageError):
    """A record file (or its format's library) cannot be read as asked."""


@dataclass(frozen=True)
class Record:
    """One record: a document's text, or the reason it is not one."""

    key: str
    text: Optional[str]
    problem: Optional[str]
    position: int


def optional_module(name: str, purpose: str) -> Any:
    """Import an optional dependency, or say which extra installs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise RecordFormatError(f"{purpose} needs the '{name}' package: {EXTRA_HINT}") from None


def is_record_file(path: Path) -> bool:
    """Whether the file's name says it holds records (JSONL or Parquet) rather than one text document."""
    return path.name.endswith(RECORD_SUFFIXES)


def is_datasets_dir(path: Path) -> bool:
    """A ``save_to_disk`` directory (``state.json`` / ``dataset_dict.json``) or a hub-cache one (``*.arrow``
    beside ``dataset_info.json``)."""
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        return True
    return (path / "dataset_info.json").is_file() and any(path.glob("*.arrow"))


def check_libraries(paths: list[Path]) -> None:
    """Fail before any work if a file's format needs a library that is not installed."""
    for path in paths:
        if path.name.endswith(PARQUET_SUFFIXES):
            optional_module("pyarrow.parquet", f"Parquet corpus file {path}")
        elif path.name.endswith(".zst"):
            optional_module("zstandard", f"zstd-compressed corpus file {path}")


def read_records(path: Path, name: str, field: str) -> Iterator[Record]:
    """The records of one JSONL or Parquet file, in file order."""
    if path.name.endswith(PARQUET_SUFFIXES):
        yield from _parquet_records(path, name, field)
    else:
        yield from _jsonl_records(path, name, field)


def document_from_value(value: Any) -> tuple[Optional[str], Optional[str]]:
    """``(text, None)`` for a usable field value, else ``(None, problem)``."""
    if value is None:
        return None, "missing field"
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None, "not UTF-8"
    if not isinstance(value, str):
        return None, "not a string"
    if not value.strip():
        return None, "empty"
    if not value.isascii():
        try:  # a JSON "\ud800" escape decodes to a lone surrogate, which no UTF-8 tokenizer can take
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None, "not UTF-8"
    return value, None


def _jsonl_records(path: Path, name: str, field: str) -> Iterator[Record]:
    with open(path, "rb") as raw:
        number = 0
        for line in _decompressed(raw, path):
            if not line.strip():
                continue  # blank lines are not records (a trailing newline, a separator)
            text, problem = _parse_line(line, field)
            yield Record(f"{name}:{number}", text, problem, raw.tell())
            number += 1


def _parse_line(line: bytes, field: str) -> tuple[Optional[str], Optional[str]]:
    try:
        decoded = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        record = json.loads(decoded)
    except ValueError:
        return None, "not JSON"
    if not isinstance(record, dict) or field not in record:
        return None, "missing field"
    return document_from_value(record[field])


def _decompressed(raw: BinaryIO, path: Path) -> BinaryIO:
    """A line-iterable binary stream of the file's content, decompressing ``.gz`` and ``.zst`` on the fly."""
    if path.name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if path.name.endswith(".zst"):
        zstandard = optional_module("zstandard", f"zstd-compressed corpus file {path}")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    return raw


def _parquet_records(path: Path, name: str, field: str) -> Iterator[Record]:
    parquet = optional_module("pyarrow.parquet", f"Parquet corpus file {path}")
    try:
        reader = parquet.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError... on a file that is not Parquet
        raise RecordFormatError(f"corpus file {path} is not a readable Parquet file: {error}") from None
    columns = reader.schema_arrow.names
    if field not in columns:
        raise RecordFormatError(
            f"Parquet file {path} has no column {field!r} (columns: {', '.join(columns)}); "
            "choose the text column with --text-field"
        )
    size, rows = path.stat().st_size, max(reader.metadata.num_rows, 1)
    number = 0
    for batch in reader.iter_batches(batch_size=_ROWS_PER_BATCH, columns=[field]):
        for value in batch.column(0).to_pylist():
            text, problem = document_from_value(value)
            number += 1
            yield Record(f"{name}:{number - 1}", text, problem, size * number // rows)


def datasets_dir_size(path: Path) -> int:
    """Bytes of the Arrow files of a datasets directory (the progress bar's total)."""
    return sum(file.stat().st_size for file in path.rglob("*.arrow"))


def read_datasets_dir(path: Path, field: str, split: str = "train") -> Iterator[Record]:
    """The rows of a local Hugging Face ``datasets`` directory (memory-mapped Arrow), in dataset order.

    ``save_to_disk`` output is opened with ``load_from_disk`` (a ``DatasetDict`` contributes its
    ``split``); a hub-cache directory (``*.arrow`` beside ``dataset_info.json``) is opened file by file
    with ``Dataset.from_file``, in sorted name order.
    """
    datasets = optional_module("datasets", f"Hugging Face datasets directory {path}")
    size, parts = datasets_dir_size(path), _dataset_parts(datasets, path, split)
    rows = max(sum(len(part) for part in parts), 1)
    number = 0
    for part in parts:
        if field not in part.column_names:
            raise RecordFormatError(
                f"datasets directory {path} has no column {field!r} (columns: {', '.join(part.column_names)}); "
                "choose the text column with --text-field"
            )
        for batch in part.select_columns([field]).iter(batch_size=_ROWS_PER_BATCH):
            for value in batch[field]:
                text, problem = document_from_value(value)
                number += 1
                yield Record(f"{path.name}:{number - 1}", text, problem, size * number // rows)


def _dataset_parts(datasets: Any, path: Path, split: str) -> list[Any]:
    if not ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        return [datasets.Dataset.from_file(str(file)) for file in sorted(path.glob("*.arrow"))]
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise RecordFormatError(f"datasets directory {path} has no split {split!r} (splits: {', '.join(loaded)})")
        loaded = loaded[split]
    return [loaded]
