"""Every reader of a file a user can be handed, fed random and mutated bytes: a clear error (an
AndreaError, which the CLI prints as one line with exit status 2) or, for run records, "no record" --
never another exception, a hang, or code run. Each case runs under a deadline.

Readers: checkpoints (checkpoint_io.load_checkpoint), weight files (load_weights: safetensors), llm.c token files (read_token_file), tokenizer
files (load_tokenizer), summary.json (rundir.read_record), suite YAML (load_suite). Cases per reader:
MAX_EXAMPLES random files plus as many single-byte mutations of a valid one (docs/reliability.md).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from andrea_lab.checkpoint_io import load_checkpoint, load_weights
from andrea_lab.data.token_file import read_token_file, write_token_file
from andrea_lab.data.tokenizer import byte_tokenizer, load_tokenizer
from andrea_lab.errors import AndreaError
from andrea_lab.rundir import HeldOut, RunRecord, read_record, write_record
from andrea_lab.sweep.suite import load_suite

MAX_EXAMPLES = 300
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=5000, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


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
    write_record(tmp, RunRecord(status="finished", final_val_loss=2.5,
                                heldout=HeldOut(2.4, 0.1, 64, 3, 1, 100, True, "documents", 0)))
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
        lambda change: valid[:change[0]] + bytes([change[1]]) + valid[change[0] + 1:])


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
    target = tmp_path / {"checkpoint": "x.ckpt", "safetensors": "x.safetensors", "token file": "x.bin",
                         "tokenizer": "x.json", "suite": "x.yaml"}[name]
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
    max_leaves=12)


def test_suites_with_wrongly_typed_keys_give_a_clear_error(tmp_path):
    """Valid YAML, wrong shapes: every suite key with random values (lists, mappings, nulls, NaN)."""
    import yaml

    from andrea_lab.sweep.suite import SUITE_KEYS

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

    from andrea_lab.data.cache import MANIFEST_FILE, load_or_build, verify_entry
    from andrea_lab.data.corpus import resolve_corpus

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    for n in range(3):
        (corpus_dir / f"doc{n}.py").write_text(f"def f{n}():\n    return {n}\n" * 20)
    corpus = resolve_corpus(str(corpus_dir))
    entry = load_or_build(corpus, "byte", 257, 0.3, str(tmp_path / "cache"))
    valid = (entry.directory / MANIFEST_FILE).read_bytes()
    key = entry.manifest["key"]

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
