"""Corpus specs: stdlib, file, directory, glob, token file; and the errors for bad ones."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from andrea_lab.data.corpus import Corpus, CorpusError, TokenCorpus, resolve_corpus
from andrea_lab.data.shards import find_val_token_file
from andrea_lab.data.token_file import write_token_file


def test_stdlib_finds_the_library_sources_without_tests_or_site_packages() -> None:
    corpus = resolve_corpus("stdlib")
    root = Path(sysconfig.get_paths()["stdlib"])
    names = corpus.relative_names()
    assert corpus.root == root
    assert len(corpus.files) > 100
    assert 3e6 < corpus.total_bytes() < 1e8
    assert names == sorted(names)
    assert all(name.endswith(".py") for name in names)
    assert "os.py" in names and "json/decoder.py" in names
    for name in names:
        parts = set(name.split("/")[:-1])
        assert not parts & {"site-packages", "test", "tests", "idlelib"}, name
    assert isinstance(corpus, Corpus) and "stdlib" in corpus.description


def test_stdlib_code_is_stdlib_without_its_generated_data_tables() -> None:
    """The quickstart's corpus: the codec tables and pydoc's help text left out, every other file kept."""
    everything, code = resolve_corpus("stdlib").relative_names(), resolve_corpus("stdlib-code").relative_names()
    left_out = set(everything) - set(code)
    assert set(code) <= set(everything) and "encodings/cp1252.py" in left_out and "pydoc_data/topics.py" in left_out
    assert {name.split("/")[0] for name in left_out} == {"encodings", "pydoc_data"}
    assert "stdlib-code" in resolve_corpus("stdlib-code").description


def test_single_text_file(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("héllo\n", encoding="utf-8")
    corpus = resolve_corpus(str(path))
    assert corpus.files == [path]
    assert corpus.relative_names() == ["a.txt"]
    assert [record.text for record in corpus.iter_records()] == ["héllo\n"]
    assert isinstance(corpus, Corpus)


def test_directory_is_recursive_sorted_and_skips_hidden_and_binary(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "z.txt").write_text("z")
    (tmp_path / "b" / "a.py").write_text("a = 1\n")
    (tmp_path / ".git" / "config").write_text("hidden dir")
    (tmp_path / ".hidden.txt").write_text("hidden file")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))  # not UTF-8, no NUL
    (tmp_path / "empty.txt").write_text("")

    corpus = resolve_corpus(str(tmp_path))
    assert corpus.relative_names() == ["b/a.py", "z.txt"]
    assert corpus.skipped_binary == 2
    assert corpus.skipped_empty == 1
    assert [record.text for record in corpus.iter_records()] == ["a = 1\n", "z"]
    assert "2 binary skipped" in corpus.description


def test_glob_pattern(generated_corpus: Path) -> None:
    corpus = resolve_corpus(str(generated_corpus / "**" / "doc_0*.txt"))
    assert len(corpus.files) == 10
    assert corpus.root == generated_corpus
    assert "sub/doc_00.txt" in corpus.relative_names()
    only_top = resolve_corpus(str(generated_corpus / "doc_1?.txt"))
    assert only_top.relative_names() == ["doc_10.txt", "doc_11.txt"]


def test_missing_path_names_it_and_lists_valid_specs(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(CorpusError) as caught:
        resolve_corpus(str(missing))
    message = str(caught.value)
    assert str(missing) in message and "does not exist" in message
    assert "'stdlib'" in message and "glob" in message and "llm.c token file" in message


def test_glob_matching_nothing(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="matches no files"):
        resolve_corpus(str(tmp_path / "*.nothing"))


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="contains no files"):
        resolve_corpus(str(tmp_path))


def test_all_empty_files_is_an_empty_corpus(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text("")
    with pytest.raises(CorpusError, match="is empty: all 2 files are empty"):
        resolve_corpus(str(tmp_path))


def test_directory_of_only_binary_files(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"\x00\x01")
    with pytest.raises(CorpusError, match="no text files"):
        resolve_corpus(str(tmp_path))


def test_binary_file_named_directly_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"PK\x03\x04\x00\x00binary")
    with pytest.raises(CorpusError, match=rf"{path}.*binary"):
        resolve_corpus(str(path))


def test_invalid_utf8_late_in_a_file_is_binary(tmp_path: Path) -> None:
    path = tmp_path / "late.txt"
    path.write_bytes(b"a" * 20_000 + b"\xff")
    with pytest.raises(CorpusError, match="binary"):
        resolve_corpus(str(path))


def test_utf8_character_across_read_chunks_is_text(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_text("é" * 1_000_000, encoding="utf-8")  # 2 MB: chunk edges fall mid-character
    assert resolve_corpus(str(path)).files == [path]


def test_empty_file_named_directly(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(CorpusError, match="is empty"):
        resolve_corpus(str(path))


def test_token_file_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "shard.bin"
    write_token_file(path, [1, 2, 3])
    corpus = resolve_corpus(str(path))
    assert isinstance(corpus, TokenCorpus) and corpus.named_file
    assert corpus.train == [path] and corpus.val == [] and corpus.manifest is None


def test_llm_c_val_sibling_is_found(tmp_path: Path) -> None:
    train = tmp_path / "fineweb_train_000001.bin"
    val = tmp_path / "fineweb_val_000000.bin"
    write_token_file(train, [1, 2, 3])
    write_token_file(val, [4, 5])
    (tmp_path / "fineweb_val_notes.bin").write_text("not a token file")
    assert find_val_token_file(train) == val
    assert find_val_token_file(val) is None
    corpus = resolve_corpus(str(train))
    assert corpus.val == [val] and "fineweb_val_000000.bin" in corpus.description


def test_fingerprint_depends_on_names_and_contents_not_location(tmp_path: Path, make_text_corpus) -> None:
    first = tmp_path / "one"
    make_text_corpus(first)
    make_text_corpus(tmp_path / "two")
    base = resolve_corpus(str(tmp_path / "one")).fingerprint()
    assert resolve_corpus(str(tmp_path / "two")).fingerprint() == base

    (first / "doc_01.txt").write_text("changed", encoding="utf-8")
    changed = resolve_corpus(str(first)).fingerprint()
    assert changed != base

    shutil.move(first / "doc_01.txt", first / "doc_01_renamed.txt")
    assert resolve_corpus(str(first)).fingerprint() not in (base, changed)


def test_fingerprint_of_token_file(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    write_token_file(path, [1, 2, 3])
    before = resolve_corpus(str(path)).fingerprint()
    write_token_file(path, [1, 2, 4])
    assert resolve_corpus(str(path)).fingerprint() != before


def test_corpus_is_a_plain_dataclass(tmp_path: Path) -> None:
    corpus = Corpus(files=[], description="nothing")
    assert corpus.skipped_binary == 0 and corpus.relative_names() == []
