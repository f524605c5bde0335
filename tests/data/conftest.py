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
