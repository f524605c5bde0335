"""The shard pipeline: exact shard sizes, manifest, split by document, same output for any worker
count, resume after an interruption, refusal to touch what is not ours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data import shard_writer
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.split import name_score
from andrea_lab.data.token_file import read_token_file
from andrea_lab.data.tokenize_corpus import tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeError, TokenizeOptions
from andrea_lab.data.tokenizer import byte_tokenizer, load_tokenizer, save_tokenizer
from andrea_lab.files import sha256_file

OPTIONS = TokenizeOptions(
    vocab_size=400, sample_docs=25, val_fraction=0.2, shard_tokens=20_000, workers=0, progress=False
)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, small_texts, jsonl_writer, bad_lines) -> Path:
    return jsonl_writer(tmp_path_factory.mktemp("c") / "c.jsonl.gz", small_texts, bad_lines)


def _stream(out: Path, split: str) -> np.ndarray:
    shards = [s for s in json.loads((out / "manifest.json").read_text())["shards"] if s["split"] == split]
    return np.concatenate([np.asarray(read_token_file(out / s["file"])) for s in shards])


def interrupt_after_closes(monkeypatch, closes: int, corpus, out, options) -> None:
    """Tokenize into ``out`` and stop it (KeyboardInterrupt, as Ctrl-C would) when the ``closes``-th shard is
    about to be closed: the shards closed before it are complete, the rest are not."""
    real_close, calls = shard_writer.ShardWriter._close, []

    def close_then_stop(self, *args):
        calls.append(self.split)
        if len(calls) == closes:
            raise KeyboardInterrupt
        real_close(self, *args)

    monkeypatch.setattr(shard_writer.ShardWriter, "_close", close_then_stop)
    with pytest.raises(KeyboardInterrupt):
        tokenize_corpus(corpus, out, options)
    monkeypatch.setattr(shard_writer.ShardWriter, "_close", real_close)


def test_shards_hold_every_document_once_with_eot_after_each(tmp_path: Path, corpus_file, small_texts) -> None:
    out = tmp_path / "out"
    report = tokenize_corpus(resolve_corpus(str(corpus_file)), out, OPTIONS)
    manifest = report.manifest
    assert manifest["complete"] and report.shards_written == len(manifest["shards"])
    for shard in manifest["shards"]:
        path = out / shard["file"]
        assert path.stat().st_size == shard["bytes"] and sha256_file(path) == shard["sha256"]
        assert shard["max_token_id"] == int(read_token_file(path).max())
    train_shards = [s for s in manifest["shards"] if s["split"] == "train"]
    assert all(s["tokens"] == OPTIONS.shard_tokens for s in train_shards[:-1])
    tokenizer = load_tokenizer(out / "tokenizer.json")
    assert tokenizer.get_vocab_size() == 400 and manifest["tokenizer"]["eot_id"] == 399
    keys = [f"c.jsonl.gz:{i}" for i in range(len(small_texts))]
    for split, wanted in (("train", False), ("val", True)):
        texts = [t for t, k in zip(small_texts, keys) if (name_score(k) < 0.2) == wanted]
        stream = _stream(out, split)
        assert stream[-1] == 399 and (stream == 399).sum() == len(texts)
        assert tokenizer.decode(stream.tolist(), skip_special_tokens=False) == "".join(
            t + "<|endoftext|>" for t in texts
        )
    totals = manifest["totals"]
    assert totals["bad_records"] == {"not UTF-8": 2, "not JSON": 1, "missing field": 1, "not a string": 1, "empty": 1}
    assert totals["records"] == len(small_texts) + 6
    assert report.bad_examples["not JSON"] == [f"c.jsonl.gz:{len(small_texts) + 2}"]


@pytest.mark.slow
def test_two_worker_processes_write_the_same_shards(tmp_path: Path, corpus_file) -> None:
    corpus = resolve_corpus(str(corpus_file))
    one = tokenize_corpus(corpus, tmp_path / "a", OPTIONS).manifest["shards"]
    two = tokenize_corpus(corpus, tmp_path / "b", TokenizeOptions(**{**OPTIONS.__dict__, "workers": 2})).manifest
    assert [s["sha256"] for s in one] == [s["sha256"] for s in two["shards"]]


def test_an_interrupted_run_resumes_without_redoing_finished_shards(tmp_path: Path, corpus_file, monkeypatch) -> None:
    corpus = resolve_corpus(str(corpus_file))
    reference = tokenize_corpus(corpus, tmp_path / "ref", OPTIONS).manifest
    out = tmp_path / "out"
    interrupt_after_closes(monkeypatch, 4, corpus, out, OPTIONS)
    partial = json.loads((out / "manifest.json").read_text())
    assert not partial["complete"] and len(partial["shards"]) == 3
    kept = {s["file"]: (out / s["file"]).stat().st_mtime_ns for s in partial["shards"]}
    report = tokenize_corpus(corpus, out, OPTIONS)
    assert report.shards_before == 3 and report.shards_written == len(reference["shards"]) - 3
    assert [s["sha256"] for s in report.manifest["shards"]] == [s["sha256"] for s in reference["shards"]]
    assert report.manifest["totals"] == reference["totals"]
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    again = tokenize_corpus(corpus, out, OPTIONS)
    assert again.complete and again.shards_written == 0


def test_other_settings_or_a_foreign_directory_are_refused(tmp_path: Path, corpus_file) -> None:
    corpus = resolve_corpus(str(corpus_file))
    tokenize_corpus(corpus, tmp_path / "out", OPTIONS)
    with pytest.raises(TokenizeError, match=r"other settings \(shard_tokens differ\)"):
        tokenize_corpus(corpus, tmp_path / "out", TokenizeOptions(**{**OPTIONS.__dict__, "shard_tokens": 19_999}))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(TokenizeError, match=r"not an `andrea tokenize` output directory"):
        tokenize_corpus(corpus, tmp_path / "mine", OPTIONS)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    with pytest.raises(TokenizeError, match=r"--workers must be 0"):
        tokenize_corpus(corpus, tmp_path / "x", TokenizeOptions(**{**OPTIONS.__dict__, "workers": -1}))


def test_an_existing_tokenizer_file_is_used_as_is(tmp_path: Path, parquet_writer, small_texts) -> None:
    save_tokenizer(byte_tokenizer(), tmp_path / "given.json")
    corpus = resolve_corpus(str(parquet_writer(tmp_path / "c.parquet", small_texts[:10])))
    options = TokenizeOptions(**{**OPTIONS.__dict__, "tokenizer": str(tmp_path / "given.json")})
    manifest = tokenize_corpus(corpus, tmp_path / "out", options).manifest
    assert manifest["tokenizer"]["vocab_size"] == 257
    stream = np.concatenate([_stream(tmp_path / "out", "train"), _stream(tmp_path / "out", "val")])
    assert len(stream) == sum(len(t.encode("utf-8")) + 1 for t in small_texts[:10])


def test_the_bpe_sample_is_seeded_uniform_and_independent_of_file_order(
    tmp_path: Path, small_texts, jsonl_writer
) -> None:
    from andrea_lab.data.split import SplitRule, document_sides
    from andrea_lab.data.tokenize_corpus import training_documents

    def sample(corpus, seed: int) -> list[str]:
        options = TokenizeOptions(tokenizer="bpe", sample_docs=8, seed=seed, val_fraction=0.2)
        return training_documents(corpus, options, document_sides(SplitRule.BY_KEY, 0.2, []))

    jsonl_writer(tmp_path / "a.jsonl", small_texts[:20])
    jsonl_writer(tmp_path / "b.jsonl", small_texts[20:])
    corpus = resolve_corpus(str(tmp_path))
    first = sample(corpus, seed=1)
    corpus.record_files.reverse()  # the same documents read in another order
    assert sample(corpus, seed=1) == first
    assert len(first) == 8 and set(first) <= set(small_texts)
    assert sample(corpus, seed=2) != first
    val_keys = {
        f"{n}:{i}"
        for n, texts in (("a.jsonl", small_texts[:20]), ("b.jsonl", small_texts[20:]))
        for i in range(len(texts))
        if name_score(f"{n}:{i}") < 0.2
    }
    assert val_keys and not set(first) & {
        small_texts[int(k.split(":")[1]) + (20 if k[0] == "b" else 0)] for k in val_keys
    }


def test_a_tokenizing_worker_imports_neither_torch_nor_lightning() -> None:
    """Each spawned worker imports the encoding modules afresh; torch and Lightning would add seconds to
    every start (andrea_lab/__init__ imports its public names lazily for this)."""
    import subprocess
    import sys

    code = (
        "import sys, andrea_lab.data.parallel_encode, andrea_lab.data.records, andrea_lab.data.shard_writer; "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_corpus_that_is_already_tokens_is_refused(tmp_path: Path) -> None:
    from andrea_lab.data.token_file import write_token_file

    write_token_file(tmp_path / "t_train.bin", np.arange(2000) % 257)
    with pytest.raises(
        TokenizeError,
        match=r"already token ids \(token file .*t_train.bin\): train on it as it is \(--data.corpus .*t_train.bin\)",
    ):
        tokenize_corpus(resolve_corpus(str(tmp_path / "t_train.bin")), tmp_path / "out", OPTIONS)
    assert not (tmp_path / "out").exists()


def test_a_directory_written_before_the_rules_were_settings_resumes_as_itself(
    tmp_path: Path, corpus_file, monkeypatch
) -> None:
    """A manifest without ``split`` / ``end_of_text`` (andrea tokenize before they were settings) was made
    by the records' rules: an interrupted run of it continues, it is not refused as 'other settings'."""
    corpus = resolve_corpus(str(corpus_file))
    options = TokenizeOptions(**{**OPTIONS.__dict__, "tokenizer": "byte", "shard_tokens": 100_000})
    reference = tokenize_corpus(corpus, tmp_path / "ref", options).manifest
    out = tmp_path / "out"
    interrupt_after_closes(monkeypatch, 2, corpus, out, options)
    manifest = json.loads((out / "manifest.json").read_text())
    for rule in ("split", "end_of_text"):
        del manifest["settings"][rule]
    (out / "manifest.json").write_text(json.dumps(manifest))
    report = tokenize_corpus(corpus, out, options)
    assert report.shards_before == 1 and report.complete
    assert [s["sha256"] for s in report.manifest["shards"]] == [s["sha256"] for s in reference["shards"]]


def test_rules_that_cannot_work_are_one_error(tmp_path: Path, corpus_file) -> None:
    corpus = resolve_corpus(str(corpus_file))
    with pytest.raises(TokenizeError, match="'at least one on each side' decides over every document name"):
        tokenize_corpus(
            corpus, tmp_path / "a", TokenizeOptions(**{**OPTIONS.__dict__, "split": "at least one on each side"})
        )
    with pytest.raises(TokenizeError, match="'between documents' needs one shard per split"):
        tokenize_corpus(
            corpus, tmp_path / "b", TokenizeOptions(**{**OPTIONS.__dict__, "end_of_text": "between documents"})
        )
    with pytest.raises(TokenizeError, match="'sideways' is not a valid SplitRule"):
        TokenizeOptions(split="sideways")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
