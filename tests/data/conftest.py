"""Fixtures of the data tests: small generated corpora, and a fresh cache directory per test.

Named apart from tests/conftest.py's ``text_corpus`` (real standard-library sources, one per session)
and ``isolated_cache`` (one cache for the session): one meaning per fixture name."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

WORDS = (
    "the model reads tokens and predicts the next one while the optimizer lowers the loss "
    "def return class import self value index window batch epoch seed layer norm attention "
    "über naïve café 東京 données λ → ✓ 🙂"
).split()


def write_text_corpus(directory: Path, n_files: int = 12, words_per_file: int = 250, seed: int = 0) -> list[Path]:
    """Write ``n_files`` deterministic pseudo-text files (some in a subdirectory)."""
    rng = random.Random(seed)
    paths = []
    for index in range(n_files):
        folder = directory / ("sub" if index % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for _ in range(words_per_file // 10):
            lines.append(" ".join(rng.choice(WORDS) for _ in range(10)))
        path = folder / f"doc_{index:02d}.txt"
        path.write_text(f"# document {index}\n" + "\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default cache at a new temporary directory for every data test (returned)."""
    root = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(root))
    return root


@pytest.fixture
def make_text_corpus():
    """The corpus writer, as a fixture so test modules need no imports from here."""
    return write_text_corpus


@pytest.fixture
def generated_corpus(tmp_path: Path) -> Path:
    """A directory of 12 small generated text documents (4 in a subdirectory)."""
    directory = tmp_path / "corpus"
    write_text_corpus(directory)
    return directory


def stdlib_documents(count: int, offset: int = 0) -> list[str]:
    """Real text from the machine: the first ``count`` standard-library modules after ``offset``."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[offset : offset + count]
    return [path.read_text(encoding="utf-8", errors="replace") for path in files]


def write_jsonl(path: Path, texts: list[str], bad_lines: tuple[bytes, ...] = (), field: str = "text") -> Path:
    """A JSONL corpus (gzip-compressed when the name ends in .gz), bad lines appended after the texts."""
    import gzip
    import json

    body = b"".join(json.dumps({field: text, "n": i}).encode("utf-8") + b"\n" for i, text in enumerate(texts))
    body += b"".join(line + b"\n" for line in bad_lines)
    path.write_bytes(gzip.compress(body) if path.name.endswith(".gz") else body)
    return path


def write_parquet(path: Path, texts: list, field: str = "text") -> Path:
    """A Parquet corpus with several row groups (so the reader's batching is exercised)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({field: texts, "n": list(range(len(texts)))}), path, row_group_size=7)
    return path


#: Lines that are not documents, one of each reason the reader reports.
BAD_LINES = (
    b'{"other": "no text field"}',
    b'{"text": "   "}',
    b"this is not json",
    b'{"text": 5}',
    b'{"text": "caf\xe9 is latin-1"}',
    b'{"text": "\\ud800 lone surrogate"}',
)


@pytest.fixture(scope="session")
def small_texts() -> list[str]:
    return stdlib_documents(40)


@pytest.fixture(scope="session")
def jsonl_writer():
    return write_jsonl


@pytest.fixture(scope="session")
def parquet_writer():
    return write_parquet


@pytest.fixture(scope="session")
def bad_lines() -> tuple[bytes, ...]:
    return BAD_LINES
