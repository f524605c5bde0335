"""Every reader of a file a user can be handed, fed random and mutated bytes: a clear error (an
AndreaError, which the CLI prints as one line with exit status 2) or, for run records, "no record" --
never another exception, a hang, or code run. Each case runs under a deadline.

Readers: checkpoints (checkpoint_io.load_checkpoint), weight files (load_weights: safetensors), llm.c token files
(read_token_file), tokenizer
files (load_tokenizer), summary.json (runs.directory.read_record), suite YAML (load_suite). Cases per reader:
MAX_EXAMPLES random files plus as many single-byte mutations of a valid one (docs/reliability.md).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from andrea_testing import within
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from andrea_lab.data.token_file import read_token_file, write_token_file
from andrea_lab.data.tokenizer import byte_tokenizer, load_tokenizer
from andrea_lab.errors import AndreaError
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.runs.checkpoint_io import load_checkpoint, load_weights
from andrea_lab.runs.directory import HeldOut, RunRecord, read_record, write_record

MAX_EXAMPLES = 300
#: Fewer for shard manifests: each case resolves (and verifies) a shard directory.
MANIFEST_EXAMPLES = 100
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=5000,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _valid_checkpoint() -> bytes:
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.ones(3)}, "hyper_parameters": {"lr": 1e-3}, "global_step": 7}, buffer)
    return buffer.getvalue()


def _valid_token_file(tmp: Path) -> bytes:
    write_token_file(tmp / "valid.bin", np.arange(40, dtype=np.uint16))
    return (tmp / "valid.bin").read_bytes()


def _valid_tokenizer() -> bytes:
    return byte_tokenizer().to_str().encode()


def _valid_record(tmp: Path) -> bytes:
    write_record(
        tmp,
        RunRecord(
            status="finished", final_val_loss=2.5, heldout=HeldOut(2.4, 0.1, 64, 3, 1, 100, True, "documents", 0)
        ),
    )
    return (tmp / "summary.json").read_bytes()


def _valid_suite(tmp: Path) -> bytes:
    (tmp / "base.yaml").write_text("model: {}\n")
    return b"base: base.yaml\nlrs: [1.0e-3, 3.0e-3]\nseeds: [0, 1]\nvariants:\n  - name: a\n  - name: b\n"


def _reads_cleanly(reader, path: Path) -> None:
    try:
        reader(path)
    except AndreaError:
        pass


def _mutations(valid: bytes):
    return st.tuples(st.integers(0, max(0, len(valid) - 1)), st.integers(0, 255)).map(
        lambda change: valid[: change[0]] + bytes([change[1]]) + valid[change[0] + 1 :]
    )


def _valid_safetensors(tmp: Path) -> bytes:
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 3)}, tmp / "valid.safetensors")
    return (tmp / "valid.safetensors").read_bytes()


READERS = {
    "checkpoint": (load_checkpoint, lambda tmp: _valid_checkpoint()),
    "safetensors": (load_weights, _valid_safetensors),
    "token file": (read_token_file, _valid_token_file),
    "tokenizer": (load_tokenizer, lambda tmp: _valid_tokenizer()),
    "suite": (load_suite, _valid_suite),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_random_and_mutated_bytes_give_a_clear_error(name, tmp_path):
    reader, make_valid = READERS[name]
    valid = make_valid(tmp_path)
    target = (
        tmp_path
        / {
            "checkpoint": "x.ckpt",
            "safetensors": "x.safetensors",
            "token file": "x.bin",
            "tokenizer": "x.json",
            "suite": "x.yaml",
        }[name]
    )
    target.write_bytes(valid)
    reader(target)  # the valid file reads

    @FUZZ
    @given(st.one_of(st.binary(max_size=512), _mutations(valid)))
    def case(data: bytes) -> None:
        calls.append(len(data))
        target.write_bytes(data)
        _reads_cleanly(reader, target)

    calls: list[int] = []
    case()
    assert len(calls) >= MAX_EXAMPLES, f"only {len(calls)} cases ran"


def test_run_records_that_are_damaged_are_no_record(tmp_path):
    valid = _valid_record(tmp_path)

    @FUZZ
    @given(st.one_of(st.binary(max_size=512), _mutations(valid)))
    def case(data: bytes) -> None:
        calls.append(len(data))
        (tmp_path / "summary.json").write_bytes(data)
        record = read_record(tmp_path)
        assert record is None or isinstance(record, RunRecord)

    calls: list[int] = []
    case()
    assert len(calls) >= MAX_EXAMPLES, f"only {len(calls)} cases ran"


_YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def test_suites_with_wrongly_typed_keys_give_a_clear_error(tmp_path):
    """Valid YAML, wrong shapes: every suite key with random values (lists, mappings, nulls, NaN)."""
    import yaml

    from andrea_lab.experiments.sweep.suite import SUITE_KEYS

    (tmp_path / "base.yaml").write_text("model: {}\n")
    target = tmp_path / "x.yaml"

    @FUZZ
    @given(st.dictionaries(st.sampled_from(SUITE_KEYS), _YAML_VALUES, max_size=len(SUITE_KEYS)))
    def case(document) -> None:
        calls.append(1)
        target.write_text(yaml.safe_dump({"base": "base.yaml", **document}))
        _reads_cleanly(load_suite, target)

    calls: list[int] = []
    case()
    assert len(calls) >= MAX_EXAMPLES, f"only {len(calls)} cases ran"


def test_a_damaged_cache_manifest_is_never_trusted(tmp_path):
    """The tokenized-corpus cache: whatever its manifest.json holds, the load gives a verified entry
    (rebuilt, with a warning, when the manifest does not vouch for the files), never an exception."""
    import warnings

    from andrea_lab.data.cache import MANIFEST_FILE, cache_key, load_or_build, options_for, verify_entry
    from andrea_lab.data.corpus import resolve_corpus
    from andrea_lab.data.tokenize_corpus import settings_of

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    for n in range(3):
        (corpus_dir / f"doc{n}.py").write_text(f"def f{n}():\n    return {n}\n" * 20)
    corpus = resolve_corpus(str(corpus_dir))
    entry = load_or_build(corpus, "byte", 257, 0.3, str(tmp_path / "cache"))
    valid = (entry.directory / MANIFEST_FILE).read_bytes()
    key = cache_key(settings_of(corpus, options_for(corpus, "byte", 257, 0.3)))

    @FUZZ
    @given(st.one_of(st.binary(max_size=256), _mutations(valid), _YAML_VALUES.map(lambda v: repr(v).encode())))
    def case(data: bytes) -> None:
        calls.append(1)
        (entry.directory / MANIFEST_FILE).write_bytes(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = load_or_build(corpus, "byte", 257, 0.3, str(tmp_path / "cache"))
        verify_entry(again.directory, key)  # what was returned is what its manifest vouches for

    calls: list[int] = []
    case()
    assert len(calls) >= MAX_EXAMPLES, f"only {len(calls)} cases ran"


# ------------------------------------------------------------------ hostile files: bounds, not bytes
# Files that are well-formed but ask for unbounded time or memory (docs/reliability.md, "Handed files
# within bounds"). Each read runs under an alarm, so a reader that would hang fails instead.


def _bomb(levels: int, width: int, key: str) -> str:
    lines = [f"  a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return f"{key}:\n" + "\n".join(lines) + "\n"


HOSTILE_YAML = {
    "alias-bomb": _bomb(9, 10, "common") + "variants:\n  - {name: a, overrides: {x: *a9}}\n",
    "wide-alias-bomb": _bomb(3, 200, "common") + "variants:\n  - {name: a, overrides: {x: *a3}}\n",
    "recursive-alias": "common: &c {x: *c}\nvariants:\n  - {name: a}\n",
    "deep-nesting": "common: " + "[" * 2000 + "]" * 2000 + "\nvariants:\n  - {name: a}\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_YAML))
def test_hostile_yaml_is_refused_by_every_yaml_reader(name, tmp_path):
    """A suite, a --config file and a value jsonargparse loads (a nested --model.config FILE): one clear
    error for an alias bomb, a recursive alias or a nesting bomb, in well under the alarm."""
    from jsonargparse import get_loader

    from andrea_lab.cli import check_config_files
    from andrea_lab.fit.cli import install_bounded_yaml

    (tmp_path / "base.yaml").write_text("model: {}\n")
    target = tmp_path / "hostile.yaml"
    target.write_text("base: base.yaml\nlrs: [1.0e-3]\nseeds: [0]\n" + HOSTILE_YAML[name])
    install_bounded_yaml()
    with within(20):
        with pytest.raises(AndreaError):
            load_suite(target)
        with pytest.raises(AndreaError):
            check_config_files(["fit", "--config", str(target)])
        with pytest.raises(yaml.YAMLError):
            get_loader("yaml")(target.read_text())


def _summary_at(run_dir: Path, kind: str) -> None:
    path = run_dir / "summary.json"
    if kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "deep-object":
        path.write_text('{"a": ' * 100 + "1" + "}" * 100)
    else:  # a record padded past any record's size
        path.write_text('{"status": "finished", "pad": "' + "x" * (70 << 20) + '"}')


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "deep", "deep-object", "huge"])
def test_a_run_record_that_is_no_file_or_too_large_is_no_record(kind, tmp_path):
    """summary.json (and the sweep markers, read by the same helper) linked to /dev/zero, a FIFO, a
    nesting bomb, or 70 MB: no record, at once (not a hang, a MemoryError or a RecursionError)."""
    _summary_at(tmp_path, kind)
    with within(20):
        assert read_record(tmp_path) is None


def test_shard_manifests_with_wrongly_typed_fields_give_a_clear_error(tmp_path):
    """A shard directory's manifest.json, every field given random values: CorpusError, nothing else."""
    import json

    from andrea_lab.data.corpus import resolve_corpus
    from andrea_lab.data.tokenize_corpus import tokenize_corpus
    from andrea_lab.data.tokenize_options import TokenizeOptions

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.txt").write_text("def f():\n    return 1\n" * 400)
    out = tmp_path / "shards"
    tokenize_corpus(
        resolve_corpus(str(corpus_dir)),
        out,
        TokenizeOptions(tokenizer="byte", val_fraction=0.5, shard_tokens=2000, workers=0, progress=False),
    )
    valid = json.loads((out / "manifest.json").read_text())
    shard_keys = sorted(valid["shards"][0])

    @settings(FUZZ, max_examples=MANIFEST_EXAMPLES)
    @given(st.sampled_from(["top", "shard"]), st.sampled_from(sorted(valid) + shard_keys), _YAML_VALUES)
    def case(where, key, value) -> None:
        calls.append(1)
        manifest = json.loads(json.dumps(valid))
        (manifest if where == "top" else manifest["shards"][0])[key] = value
        (out / "manifest.json").write_text(json.dumps(manifest))
        _reads_cleanly(lambda path: resolve_corpus(str(path)), out)

    calls: list[int] = []
    case()
    assert len(calls) >= MANIFEST_EXAMPLES, f"only {len(calls)} cases ran"
