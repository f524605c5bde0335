"""Fill fixed-size llm.c shards from a stream of documents, one split at a time, resumably.

Each split (train, val) has a :class:`ShardWriter` holding one preallocated buffer of
``shard_tokens`` uint16 ids: memory is the shard size, whatever the corpus size. A full buffer is
written atomically (temporary file, fsync, rename) and then recorded in the manifest, so a shard
named in the manifest is always complete; an interruption loses at most the shard being filled.

Where a shard ends is recorded as ``end = {"record": R, "carry": C}``: the split continues with
record R from its token C (C > 0 when the document straddles two shards). Resuming reads the corpus
again without tokenizing anything before that point, and drops the first C tokens of record R.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from andrea_lab.data.shards import SPLITS, shard_entry, shard_name
from andrea_lab.data.token_file import token_file_header
from andrea_lab.files import atomic_write

#: Called with each finished shard's manifest record.
OnShard = Callable[[dict[str, Any]], None]


@dataclass
class ShardWriter:
    """The shard being filled for one split, and where the split's finished shards stopped."""

    directory: Path
    split: str
    shard_tokens: int
    on_shard: OnShard
    next_index: int = 0
    resume_record: int = 0
    resume_carry: int = 0
    tokens_written: int = 0
    _buffer: np.ndarray = field(init=False, repr=False)
    _filled: int = field(default=0, init=False)
    _shard_documents: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._buffer = np.empty(self.shard_tokens, dtype="<u2")

    def wants(self, record: int) -> bool:
        """Whether record ``record`` still has tokens to write (it is not inside a finished shard)."""
        return record >= self.resume_record

    @property
    def has_tokens(self) -> bool:
        """Whether the split has any tokens yet (written or waiting in the buffer)."""
        return self.tokens_written + self._filled > 0

    def add(self, record: int, tokens: np.ndarray, bad_before: dict[str, int], starts_document: bool = True) -> None:
        """Append one document's tokens (its end-of-text included), closing shards as they fill.

        ``bad_before`` counts the bad records before ``record``: a shard closed now records it, so a
        resume that restarts here can carry the count on. ``starts_document`` is false for the
        validation tail of a document split by position, which the training side counts.
        """
        if record == self.resume_record and self.resume_carry:
            tokens = tokens[self.resume_carry :]  # its start is in the previous shard, which counted it
        elif starts_document:
            self._shard_documents += 1
        offset = 0
        while offset < len(tokens):
            taken = min(len(tokens) - offset, self.shard_tokens - self._filled)
            self._buffer[self._filled : self._filled + taken] = tokens[offset : offset + taken]
            self._filled += taken
            offset += taken
            if self._filled == self.shard_tokens:
                end = (record, offset) if offset < len(tokens) else (record + 1, 0)
                self._close(end, bad_before)

    def finish(self, records: int, bad: dict[str, int]) -> None:
        """Write the last, partial shard (if any tokens are waiting)."""
        if self._filled:
            self._close((records, 0), bad)

    def _close(self, end: tuple[int, int], bad_before: dict[str, int]) -> None:
        name = shard_name(self.split, self.next_index)
        payload = self._buffer[: self._filled]
        header = token_file_header(self._filled)
        digest = hashlib.sha256(header)
        digest.update(memoryview(payload))

        def write(handle) -> None:
            handle.write(header)
            handle.write(memoryview(payload))

        atomic_write(self.directory / name, write)
        record = shard_entry(
            name, self.split, self.next_index, payload, digest.hexdigest(), self._shard_documents, end, bad_before
        )
        self.tokens_written += self._filled
        self.next_index += 1
        self._filled = 0
        self._shard_documents = 0
        self.resume_record, self.resume_carry = end
        self.on_shard(record)


def resumed_writers(
    directory: Path, shards: list[dict[str, Any]], shard_tokens: int, on_shard: OnShard
) -> tuple[dict[str, ShardWriter], Counter]:
    """A writer per split positioned after its finished ``shards`` (the manifest's), and the bad-record
    counts up to the earliest of them: where a resumed run continues."""
    writers, bad = {}, Counter()
    earliest: Optional[dict[str, Any]] = None
    for split in SPLITS:
        writer = ShardWriter(directory, split, shard_tokens, on_shard)
        done = [shard for shard in shards if shard["split"] == split]
        if done:
            last = done[-1]
            writer.next_index = last["index"] + 1
            writer.resume_record, writer.resume_carry = last["end"]["record"], last["end"]["carry"]
            writer.tokens_written = sum(shard["tokens"] for shard in done)
        if earliest is None or writer.resume_record < earliest["record"]:
            earliest = {"record": writer.resume_record, "bad": last["bad_records_before_end"] if done else {}}
        writers[split] = writer
    bad.update(earliest["bad"] if earliest else {})
    return writers, bad
