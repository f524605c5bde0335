"""Read and write token files in llm.c's shard format.

We use llm.c's format (rather than inventing one) so shards produced by
llm.c's data scripts can be trained on directly, and so our own cached
corpora can be inspected with llm.c's tools. The layout is:

* a header of 256 little-endian int32: ``header[0]`` is the magic
  20240520, ``header[1]`` the version 1, ``header[2]`` the number of tokens;
* then the tokens as little-endian uint16.

Reading returns a read-only ``numpy.memmap`` so a corpus of any size costs
no RAM until windows are sliced out of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np
import numpy.typing as npt

from andrea_lab.errors import UsageError
from andrea_lab.files import atomic_write

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKEN_ID = 65535  # uint16: the format cannot store a larger id

_HEADER_DTYPE = np.dtype("<i4")
_TOKEN_DTYPE = np.dtype("<u2")

PathLike = Union[str, "os.PathLike[str]"]


class TokenFileError(UsageError):
    """A file that claims to be (or was given as) a token file is not a valid one."""


def write_token_file(path: PathLike, tokens: npt.ArrayLike) -> None:
    """Write ``tokens`` to ``path`` in llm.c format, atomically (files.atomic_write: a reader, or a
    crash, never sees a half-written file)."""
    path = Path(path)
    array = np.asarray(tokens)
    if array.ndim != 1:
        raise ValueError(f"tokens must be a 1-D array of ids, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"tokens must be integers, got dtype {array.dtype}")
    if array.size:
        lowest, highest = int(array.min()), int(array.max())
        if lowest < 0:
            raise ValueError(
                f"token id {lowest} cannot be stored: llm.c token files hold ids 0..{MAX_TOKEN_ID} (uint16)"
            )
        if highest > MAX_TOKEN_ID:
            raise ValueError(
                f"token id {highest} cannot be stored: llm.c token files hold ids 0..{MAX_TOKEN_ID} (uint16)"
            )
    header = token_file_header(array.size)
    payload = array.astype(_TOKEN_DTYPE, copy=False)

    def write(handle) -> None:
        handle.write(header)
        handle.write(payload.tobytes())

    atomic_write(path, write)


def token_file_header(count: int) -> bytes:
    """The 256-int32 llm.c header of a file of ``count`` tokens (every writer of token files uses it)."""
    header = np.zeros(HEADER_INTS, dtype=_HEADER_DTYPE)
    header[0], header[1], header[2] = MAGIC, VERSION, count
    return header.tobytes()


def read_token_file(path: PathLike) -> np.memmap:
    """Memory-map the tokens of an llm.c token file (read-only, dtype uint16).

    The header is checked first so a wrong or damaged file fails here with a
    sentence naming it, instead of training on garbage.
    """
    path = Path(path)
    count = _checked_token_count(path)
    if count == 0:
        # np.memmap refuses to map zero bytes; an empty read-only view behaves the same.
        empty = np.zeros(0, dtype=_TOKEN_DTYPE).view(np.memmap)
        empty.flags.writeable = False
        return empty
    return np.memmap(path, dtype=_TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))


def is_token_file(path: PathLike) -> bool:
    """Whether ``path`` starts with the llm.c magic; never raises."""
    try:
        with open(path, "rb") as handle:
            first = handle.read(4)
    except OSError:
        return False
    return len(first) == 4 and int.from_bytes(first, "little", signed=True) == MAGIC


def _checked_token_count(path: Path) -> int:
    """Validate the header against the file and return the token count."""
    try:
        actual_size = path.stat().st_size
        with open(path, "rb") as handle:
            raw = handle.read(HEADER_BYTES)
    except FileNotFoundError:
        raise TokenFileError(f"token file {path} does not exist") from None
    return header_token_count(raw, actual_size, path)


def header_token_count(raw: bytes, actual_size: int, path: PathLike) -> int:
    """The token count of the header ``raw`` (the file's first bytes) of a ``actual_size``-byte file,
    checked (magic, version, size); for readers that already hold the header (shard_check hashes it)."""
    if len(raw) < HEADER_BYTES:
        raise TokenFileError(
            f"{path} is {actual_size} bytes, shorter than the {HEADER_BYTES}-byte llm.c header, "
            "so it is not a token file"
        )
    header = np.frombuffer(raw[:HEADER_BYTES], dtype=_HEADER_DTYPE)
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    if magic != MAGIC:
        raise TokenFileError(f"{path} has magic {magic}, expected {MAGIC}: it is not an llm.c token file")
    if version != VERSION:
        raise TokenFileError(f"{path} is token-file version {version}, but only version {VERSION} is supported")
    expected_size = HEADER_BYTES + 2 * count
    if count < 0 or expected_size != actual_size:
        raise TokenFileError(
            f"{path} is {actual_size} bytes but its header promises {count} tokens, i.e. {expected_size} bytes: "
            "the file is truncated or corrupt"
        )
    return count


class MappedTokens:
    """Tokens ``[start, stop)`` of a token file, memory-mapped on first use.

    Datasets hold this instead of a bare memmap because pickling a memmap
    (as DataLoader workers started with 'spawn' or 'forkserver' do) copies
    all of its data; this pickles as just the path and bounds, and each
    worker maps the file itself.
    """

    def __init__(self, path: PathLike, start: int = 0, stop: "int | None" = None) -> None:
        self.path = Path(path)
        self._array: "np.memmap | None" = None
        total = len(self._tokens_of_file())
        self.start = start
        self.stop = total if stop is None else stop
        if not 0 <= self.start <= self.stop <= total:
            raise ValueError(f"bounds [{start}, {stop}) are outside the {total} tokens of {self.path}")

    def _tokens_of_file(self) -> np.memmap:
        if self._array is None:
            self._array = read_token_file(self.path)
        return self._array

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("MappedTokens supports contiguous slices only")
        begin, end, _ = key.indices(len(self))
        return self._tokens_of_file()[self.start + begin : self.start + max(begin, end)]

    def max(self) -> int:
        """The largest token id (0 when empty); reads the whole range once."""
        if len(self) == 0:
            return 0
        return int(self._tokens_of_file()[self.start : self.stop].max())

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_array"] = None
        return state


class ConcatenatedTokens:
    """Several token files (shards) read as one stream, each memory-mapped on first use.

    Slices that cross a shard boundary are stitched from both sides, so windows, the held-out scan
    and the deterministic sampler see one stream of ``sum(len(shard))`` tokens, whatever the number
    of shards. Pickles as the paths and bounds, like :class:`MappedTokens`.
    """

    def __init__(self, parts: "list[MappedTokens]") -> None:
        self.parts = [part for part in parts if len(part)]
        self._starts = np.cumsum([0] + [len(part) for part in self.parts])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("ConcatenatedTokens supports contiguous slices only")
        begin, end, _ = key.indices(len(self))
        if end <= begin:
            return np.zeros(0, dtype=_TOKEN_DTYPE)
        first = int(np.searchsorted(self._starts, begin, side="right")) - 1
        pieces = []
        while begin < end:
            offset = int(self._starts[first])
            stop = min(end, int(self._starts[first + 1]))
            pieces.append(self.parts[first][begin - offset : stop - offset])
            begin, first = stop, first + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def max(self) -> int:
        """The largest token id over every shard (0 when empty)."""
        return max((part.max() for part in self.parts), default=0)
