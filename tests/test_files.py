"""andrea_lab.files: atomic writes keep the old file on failure; hashes match hashlib's."""

from __future__ import annotations

import errno
import hashlib
import json
import os

import pytest

from andrea_lab.errors import DiskFullError
from andrea_lab.files import atomic_write, read_json, sha256_file, sha256_text, write_json_atomic


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"schema": 2, "status": "finished"})

    def broken(handle):
        handle.write(b'{"schema": 2, "sta')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, broken)
    assert json.loads(path.read_text()) == {"schema": 2, "status": "finished"}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"], "no temporary file left behind"
    with pytest.raises(ValueError):
        write_json_atomic(path, {"loss": float("nan")})  # JSON has no NaN: never written as such
    assert read_json(path)["status"] == "finished"


def test_read_json_is_none_for_missing_damaged_or_non_object_files(tmp_path):
    assert read_json(tmp_path / "missing.json") is None
    (tmp_path / "half.json").write_text('{"status": "fin')
    assert read_json(tmp_path / "half.json") is None
    (tmp_path / "list.json").write_text("[1, 2]")
    assert read_json(tmp_path / "list.json") is None


def test_hashes_match_hashlib(tmp_path):
    data = bytes(range(256)) * 5000  # more than one 1 MiB read
    (tmp_path / "blob").write_bytes(data)
    assert sha256_file(tmp_path / "blob") == hashlib.sha256(data).hexdigest()
    assert sha256_text("ANDREA ✓") == hashlib.sha256("ANDREA ✓".encode()).hexdigest()


def test_a_full_disk_names_the_file_and_keeps_the_previous_one(tmp_path):
    path = tmp_path / "sweep-done.json"
    write_json_atomic(path, {"status": "finished"})

    def full(handle):
        handle.write(b'{"sta')
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("unexpected pos 64")  # noqa: B904 (what torch.save raises: the OSError as context)

    with pytest.raises(DiskFullError) as raised:
        atomic_write(path, full)
    message = str(raised.value)
    assert f"the disk is full (No space left on device) while writing {path}" in message
    assert "the previous version of it is intact" in message and "no partial file was left" in message
    assert raised.value.exit_status == 5
    assert read_json(path) == {"status": "finished"}
    assert [p.name for p in tmp_path.iterdir()] == ["sweep-done.json"]
    with pytest.raises(DiskFullError, match="nothing was written"):
        atomic_write(tmp_path / "new.json", full)


def test_atomic_write_keeps_the_files_mode_and_gives_a_new_file_opens_mode(tmp_path):
    """mkstemp makes 0600 files: every rewritten file (a user's --doc, a record) used to become 0600."""
    path = tmp_path / "notes.md"
    path.write_text("old")
    path.chmod(0o664)
    atomic_write(path, lambda handle: handle.write(b"new"))
    assert (path.stat().st_mode & 0o777, path.read_text()) == (0o664, "new")
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "fresh.json", lambda handle: handle.write(b"{}"))
    finally:
        os.umask(umask)
    assert ((tmp_path / "fresh.json").stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_directory_or_fifo_handed_as_a_file_is_one_line_not_a_traceback(tmp_path, kind):
    from andrea_lab.files import HandedFileError, load_json

    path = tmp_path / "record.json"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    refused = r"record\.json is not a regular file \(a FIFO, a device or a directory\)"
    with pytest.raises(HandedFileError, match=refused):
        load_json(path, "search record")
