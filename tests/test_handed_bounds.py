"""What a handed file or a command-line value can make andrea allocate, wait for or overwrite, checked
where a CLI case in test_bad_inputs.py cannot reach: `compare --doc`'s writer and markers, `import`
sizing a model from config.json, the shard-count bound of `tokenize`, and the one-line translation of
environment errors (docs/reliability.md)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from andrea_lab.cli import environment_error, main
from andrea_lab.commands.compare import write_doc_block
from andrea_lab.errors import DiskFullError, UsageError
from andrea_lab.experiments.compare import doc_blocks

BEGIN, END = "<!-- andrea compare: BEGIN s claims -->", "<!-- andrea compare: END s claims -->"


@pytest.mark.parametrize(
    "text,problem",
    [
        (f"intro\n{BEGIN}\nold table\n", "has no `<!-- andrea compare: END"),
        (f"intro\n{END}\nprose\n{BEGIN}\nold\n", "comes before"),
        (f"{END}\nprose\n", "has no `<!-- andrea compare: BEGIN"),
        (f"{BEGIN}\na\n{END}\n{BEGIN}\nb\n{END}\n", "appears 2 times"),
    ],
    ids=["begin-without-end", "end-before-begin", "end-alone", "twice"],
)
def test_markers_that_do_not_pair_up_are_refused_and_the_doc_is_untouched(tmp_path, text, problem):
    doc = tmp_path / "results.md"
    doc.write_text(text)
    with pytest.raises(doc_blocks.GeneratedBlockError, match=problem):
        write_doc_block(doc, "s", "| new |")
    assert doc.read_text() == text


def test_a_full_disk_leaves_the_doc_as_it_was(tmp_path, monkeypatch):
    """--doc goes through the atomic writer: the write fails, the user's document is intact."""
    doc = tmp_path / "results.md"
    text = f"my prose\n{BEGIN}\nold\n{END}\nmore prose\n"
    doc.write_text(text)

    def full(handle):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    from andrea_lab import files

    real = files.atomic_write
    monkeypatch.setattr("andrea_lab.commands.compare.atomic_write", lambda path, write: real(path, full))
    with pytest.raises(DiskFullError):
        write_doc_block(doc, "s", "| new |")
    assert doc.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]


def test_a_doc_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "doc.md")
    with pytest.raises(UsageError, match="not a regular file"):
        write_doc_block(tmp_path / "doc.md", "s", "| new |")


def test_a_docs_mode_is_kept_when_its_block_is_rewritten(tmp_path):
    """The atomic writer's temporary file is made 0600 by mkstemp: the rewritten doc used to be 0600 (issue 59)."""
    doc = tmp_path / "results.md"
    doc.write_text(f"my prose\n{BEGIN}\nold\n{END}\n")
    for mode in (0o644, 0o640):
        doc.chmod(mode)
        write_doc_block(doc, "s", f"| new {mode:o} |")
        assert (doc.stat().st_mode & 0o777) == mode
        assert f"| new {mode:o} |" in doc.read_text()


def test_a_doc_that_is_a_symbolic_link_is_refused_and_both_files_kept(tmp_path):
    """Rewriting through a link used to replace the link with a file (the linked document unchanged)."""
    real = tmp_path / "elsewhere.md"
    real.write_text(f"{BEGIN}\nold\n{END}\n")
    link = tmp_path / "results.md"
    link.symlink_to(real)
    with pytest.raises(UsageError, match="is a symbolic link .*Pass the file it links to"):
        write_doc_block(link, "s", "| new |")
    assert link.is_symlink() and real.read_text() == f"{BEGIN}\nold\n{END}\n"


def test_import_checks_the_weights_against_config_json_before_allocating_the_model(tmp_path, monkeypatch):
    """A two-line config.json can describe a model of any size: nothing real is built until the weights
    are found to have its shapes (here they do not, so no model is built at all)."""
    pytest.importorskip("transformers")
    from safetensors.torch import save_file

    from andrea_lab.fit.module import AndreaLM

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 300, "n_positions": 64}
        )
    )
    save_file({"wte.weight": torch.ones(2, 2)}, tmp_path / "hf" / "model.safetensors")
    built = []

    def recording(*args, **kwargs):
        built.append(torch.empty(0).device.type)  # "meta" inside `with torch.device("meta")`
        return AndreaLM(*args, **kwargs)

    monkeypatch.setattr("andrea_lab.interop.import_hf.AndreaLM", recording)  # the name the import looks up
    assert main(["import", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "x.ckpt")]) == 2
    assert built == ["meta"]


def test_tokenize_refuses_a_shard_size_that_would_make_too_many_shards(tmp_path):
    from andrea_lab.data.corpus import resolve_corpus
    from andrea_lab.data.tokenize_options import MAX_SHARDS, TokenizeError, check_shard_count

    (tmp_path / "a.txt").write_text("x" * (MAX_SHARDS * 1024 + 10))
    corpus = resolve_corpus(str(tmp_path / "a.txt"))
    with pytest.raises(TokenizeError, match=r"--shard-tokens 1,024 could split .* use --shard-tokens 1,0\d\d or more"):
        check_shard_count(corpus, 1024)
    check_shard_count(corpus, 4096)


@pytest.mark.parametrize(
    "exc,fragment",
    [
        (PermissionError(errno.EACCES, "Permission denied", "/runs/x"), "cannot use /runs/x: Permission denied"),
        (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x"), "Read-only file system"),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 51539607552 bytes."),
            "out of memory allocating 51.5 GB",
        ),
        (MemoryError(), "out of memory"),
    ],
    ids=["permission", "read-only", "allocator", "memory-error"],
)
def test_environment_errors_are_one_line(exc, fragment):
    message = environment_error(exc)
    assert fragment in message and "\n" not in message


def test_other_errors_stay_tracebacks():
    assert environment_error(RuntimeError("a bug")) is None
    assert environment_error(OSError(errno.EIO, "I/O error", "/x")) is None


def test_a_command_that_hits_an_unwritable_path_mid_run_exits_2(tmp_path, monkeypatch, capsys):
    """Past the up-front checks (a directory made read-only meanwhile, EACCES as a non-root user): one line."""

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "p"))

    monkeypatch.setattr(Path, "write_text", denied)
    assert main(["new-plugin", "activation", "foo", "--dir", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "Permission denied" in err and "Traceback" not in err
