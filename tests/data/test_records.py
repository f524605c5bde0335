"""Record readers: JSONL (plain, gzip, zstd), Parquet and datasets directories, bad records named."""

from __future__ import annotations

from pathlib import Path

import pytest

from andrea_lab.data.corpus import CorpusError, resolve_corpus
from andrea_lab.data.records import RecordFormatError, read_records


def _texts(corpus) -> list:
    return [record.text for record in corpus.iter_records()]


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_jsonl_records_and_every_bad_reason(tmp_path: Path, small_texts, jsonl_writer, bad_lines, name) -> None:
    path = jsonl_writer(tmp_path / name, small_texts[:5], bad_lines)
    records = list(resolve_corpus(str(path)).iter_records())
    assert [r.text for r in records[:5]] == small_texts[:5]
    assert [r.key for r in records[:2]] == [f"{name}:0", f"{name}:1"]
    assert [r.problem for r in records[5:]] == [
        "missing field",
        "empty",
        "not JSON",
        "not a string",
        "not UTF-8",
        "not UTF-8",
    ]
    positions = [r.position for r in records]
    assert positions == sorted(positions) and positions[-1] == path.stat().st_size


def test_zstd_and_custom_field(tmp_path: Path, small_texts, jsonl_writer) -> None:
    zstandard = pytest.importorskip("zstandard")
    plain = jsonl_writer(tmp_path / "p.jsonl", small_texts[:3], field="content")
    (tmp_path / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert _texts(resolve_corpus(str(tmp_path / "z.jsonl.zst"), text_field="content")) == small_texts[:3]
    assert {r.problem for r in resolve_corpus(str(plain)).iter_records()} == {"missing field"}


def test_parquet_records_in_order_with_nulls_counted(tmp_path: Path, small_texts, parquet_writer) -> None:
    path = parquet_writer(tmp_path / "c.parquet", [*small_texts[:20], None, ""])
    records = list(resolve_corpus(str(path)).iter_records())
    assert [r.text for r in records[:20]] == small_texts[:20]
    assert [r.problem for r in records[20:]] == ["missing field", "empty"]
    assert records[-1].position == path.stat().st_size


def test_parquet_without_the_column_names_the_columns(tmp_path: Path, small_texts, parquet_writer) -> None:
    path = parquet_writer(tmp_path / "c.parquet", small_texts[:2], field="body")
    with pytest.raises(RecordFormatError, match=r"no column 'text' \(columns: body, n\).*--text-field"):
        list(read_records(path, "c.parquet", "text"))


def test_directory_and_glob_of_record_files_in_name_order(tmp_path: Path, small_texts, jsonl_writer) -> None:
    jsonl_writer(tmp_path / "b.jsonl.gz", small_texts[2:4])
    jsonl_writer(tmp_path / "a.jsonl", small_texts[:2])
    for spec in (str(tmp_path), str(tmp_path / "*.jsonl*")):
        corpus = resolve_corpus(spec)
        assert corpus.is_records and _texts(corpus) == small_texts[:4]


def test_record_files_mixed_with_other_files_are_refused(tmp_path: Path, small_texts, jsonl_writer) -> None:
    jsonl_writer(tmp_path / "a.jsonl", small_texts[:2])
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CorpusError, match=r"mixes record files .*notes\.txt.*\*\.jsonl"):
        resolve_corpus(str(tmp_path))


def test_datasets_directory_through_the_datasets_library(tmp_path: Path, small_texts) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": small_texts[:6]}).save_to_disk(str(tmp_path / "single"))
    dict_dir = tmp_path / "dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": small_texts[:3]})}).save_to_disk(str(dict_dir))
    assert _texts(resolve_corpus(str(tmp_path / "single"))) == small_texts[:6]
    assert _texts(resolve_corpus(str(dict_dir))) == small_texts[:3]
    hub = tmp_path / "hub-cache"  # the hub cache's layout: *.arrow beside dataset_info.json, no state.json
    hub.mkdir()
    for file in (tmp_path / "single").iterdir():
        if file.suffix == ".arrow" or file.name == "dataset_info.json":
            (hub / file.name).write_bytes(file.read_bytes())
    assert _texts(resolve_corpus(str(hub))) == small_texts[:6]


def test_a_missing_optional_library_names_the_extra(tmp_path: Path, monkeypatch, small_texts, parquet_writer) -> None:
    import sys

    path = parquet_writer(tmp_path / "c.parquet", small_texts[:2])
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # what Python does for a package not installed
    with pytest.raises(RecordFormatError, match=r"Parquet corpus file .*pip install -e '\.\[corpora\]'"):
        resolve_corpus(str(path))


def test_a_missing_corpus_says_the_tokenize_command(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"does not exist.*andrea tokenize CORPUS --out DIR"):
        resolve_corpus(str(tmp_path / "shards"))
