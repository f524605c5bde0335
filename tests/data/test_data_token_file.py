"""llm.c token files: exact round trip, and one clear error per kind of damage."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_lab.data.token_file import (
    HEADER_BYTES,
    MAGIC,
    MappedTokens,
    TokenFileError,
    is_token_file,
    read_token_file,
    write_token_file,
)


def _write_raw(path: Path, magic: int = MAGIC, version: int = 1, count: int = 3, tokens: int = 3) -> Path:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, count)
    path.write_bytes(header.tobytes() + np.arange(tokens, dtype="<u2").tobytes())
    return path


def test_round_trip_preserves_tokens_and_header(tmp_path: Path) -> None:
    tokens = np.array([0, 1, 255, 256, 50256, 65535], dtype=np.int64)
    path = tmp_path / "tokens.bin"
    write_token_file(path, tokens)

    raw = path.read_bytes()
    header = np.frombuffer(raw[:HEADER_BYTES], dtype="<i4")
    assert list(header[:3]) == [20240520, 1, 6]
    assert len(raw) == HEADER_BYTES + 2 * 6
    loaded = read_token_file(path)
    assert isinstance(loaded, np.memmap)
    assert loaded.dtype == np.uint16
    assert not loaded.flags.writeable
    assert loaded.tolist() == tokens.tolist()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=65535), max_size=300))
def test_round_trip_any_ids(tmp_path_factory: pytest.TempPathFactory, ids: list[int]) -> None:
    path = tmp_path_factory.mktemp("rt") / "t.bin"
    write_token_file(path, ids)
    assert read_token_file(path).tolist() == ids


def test_empty_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    write_token_file(path, [])
    assert len(read_token_file(path)) == 0


@pytest.mark.parametrize("bad_id", [-1, 65536, 100_000])
def test_rejects_ids_outside_uint16(tmp_path: Path, bad_id: int) -> None:
    with pytest.raises(ValueError, match=rf"token id {bad_id} .*0\.\.65535"):
        write_token_file(tmp_path / "t.bin", [1, bad_id, 2])
    assert not (tmp_path / "t.bin").exists()


def test_rejects_non_integer_and_2d(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="integers"):
        write_token_file(tmp_path / "t.bin", [1.5, 2.0])
    with pytest.raises(ValueError, match="1-D"):
        write_token_file(tmp_path / "t.bin", [[1, 2]])


def test_wrong_magic_names_file_and_both_magics(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "bad.bin", magic=1234)
    with pytest.raises(TokenFileError) as caught:
        read_token_file(path)
    message = str(caught.value)
    assert str(path) in message and "1234" in message and "20240520" in message


def test_wrong_version_is_reported(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "v2.bin", version=2)
    with pytest.raises(TokenFileError, match=r"version 2.*version 1"):
        read_token_file(path)


def test_truncated_file_reports_expected_and_actual_size(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    write_token_file(path, np.arange(100))
    with open(path, "r+b") as handle:
        handle.truncate(HEADER_BYTES + 150)
    with pytest.raises(TokenFileError) as caught:
        read_token_file(path)
    message = str(caught.value)
    assert str(path) in message
    assert str(HEADER_BYTES + 150) in message and str(HEADER_BYTES + 200) in message and "100 tokens" in message


def test_file_shorter_than_header(tmp_path: Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(b"\x00" * 100)
    with pytest.raises(TokenFileError, match=r"100 bytes, shorter than the 1024-byte"):
        read_token_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="does not exist"):
        read_token_file(tmp_path / "nope.bin")


def test_is_token_file_never_raises(tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    write_token_file(good, [1, 2, 3])
    text = tmp_path / "text.txt"
    text.write_text("hello")
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"\x01")
    assert is_token_file(good)
    assert not is_token_file(text)
    assert not is_token_file(tiny)
    assert not is_token_file(tmp_path / "missing")
    assert not is_token_file(tmp_path)  # a directory


def test_write_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.bin"
    write_token_file(path, [7, 8, 9])

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_token_file(path, [1, 2, 3, 4])
    monkeypatch.undo()
    assert read_token_file(path).tolist() == [7, 8, 9]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"]


def test_mapped_tokens_slices_and_pickles_without_data(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    write_token_file(path, np.arange(10_000) % 65536)
    view = MappedTokens(path, 100, 5100)
    assert len(view) == 5000
    assert view[0:3].tolist() == [100, 101, 102]
    assert view[4998:5005].tolist() == [5098, 5099]
    assert view.max() == 5099

    blob = pickle.dumps(view)
    assert len(blob) < 1000  # the path and bounds, not 10 KB of tokens
    clone = pickle.loads(blob)
    assert clone[10:12].tolist() == [110, 111]
    with pytest.raises(ValueError, match="outside"):
        MappedTokens(path, 0, 10_001)
