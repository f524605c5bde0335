"""Encode batches of documents in worker processes, results in submission order, memory bounded.

Why processes: HF ``tokenizers`` parallelises ``encode_batch`` with its own Rayon threads, but the
pre-tokenizer's regex and the BPE merges of one batch are only part of the work; reading, JSON
decoding and building Python ``Encoding`` objects hold the GIL. Worker processes scale all of it.

How cores are shared: each of ``workers`` processes gets ``max(1, cores // workers)`` Rayon threads
(``RAYON_NUM_THREADS``, set before its first encode; ``TOKENIZERS_PARALLELISM=false`` when that is
1), so workers × threads never exceeds the cores. Workers are started with ``spawn``: forking a
process whose Rayon pool already ran (the BPE was just trained in it) can deadlock, which is what
tokenizers' ``TOKENIZERS_PARALLELISM`` warning is about.

At most ``2 × workers`` batches are in flight: the reader cannot run ahead of the writer, so memory
stays a few batches whatever the corpus size (``Pool.imap`` would read the whole input ahead).
``workers=0`` encodes in the calling process (tests, small corpora, the data module's cache).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import deque
from typing import Any, Iterable, Iterator, Optional

import numpy as np
from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib

_STOP_SECONDS = 5.0
_worker_tokenizer: Optional[Tokenizer] = None
_worker_eot = 0


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, e.g. a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_per_worker(workers: int, cores: Optional[int] = None) -> int:
    """Rayon threads each worker may use so that workers × threads stays within the cores."""
    return max(1, (cores or available_cores()) // max(1, workers))


def encode_texts(tokenizer: Tokenizer, eot: int, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, lengths)``: every text's ids followed by ``eot``, concatenated; ``lengths`` per text.

    One array (not a list of them) is what crosses the process boundary: pickling is one copy.
    """
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
    lengths = np.fromiter((len(encoding.ids) + 1 for encoding in encodings), dtype=np.int64, count=len(texts))
    ids = np.empty(int(lengths.sum()), dtype=np.uint16)
    ends = np.cumsum(lengths)
    for encoding, end, length in zip(encodings, ends, lengths):
        ids[end - length : end - 1] = encoding.ids
        ids[end - 1] = eot
    return ids, lengths


def _init_worker(tokenizer_json: str, threads: int) -> None:
    global _worker_tokenizer, _worker_eot
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    _worker_tokenizer = tokenizers_lib.tokenizer_from_json(tokenizer_json)
    _worker_eot = tokenizers_lib.eot_id(_worker_tokenizer)


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    assert _worker_tokenizer is not None
    return encode_texts(_worker_tokenizer, _worker_eot, texts)


def encode_ordered(
    tokenizer: Tokenizer, jobs: Iterable[tuple[Any, list[str]]], workers: int
) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
    """``(tag, ids, lengths)`` for each ``(tag, texts)`` job, in job order, encoded by ``workers`` processes."""
    eot = tokenizers_lib.eot_id(tokenizer)
    if workers == 0:
        for tag, texts in jobs:
            yield (tag, *encode_texts(tokenizer, eot, texts))
        return
    context = multiprocessing.get_context("spawn")
    init = (tokenizer.to_str(), threads_per_worker(workers))
    before = set(multiprocessing.active_children())
    pool = context.Pool(workers, initializer=_init_worker, initargs=init)
    finished = False
    try:
        pending: deque = deque()
        for tag, texts in jobs:
            pending.append((tag, pool.apply_async(_encode_in_worker, (texts,))))
            if len(pending) >= 2 * workers:
                tag_done, result = pending.popleft()
                yield (tag_done, *result.get())
        while pending:
            tag_done, result = pending.popleft()
            yield (tag_done, *result.get())
        pool.close()
        pool.join()
        finished = True
    finally:
        if not finished:
            _stop(pool, [child for child in multiprocessing.active_children() if child not in before])


def _stop(pool: Any, workers: list) -> None:
    """Stop at once after an interruption or error: kill the workers, then let the pool clean up.

    ``Pool.terminate`` waits for the pool's task thread, which may be blocked writing a ~1 MB batch
    into a pipe far smaller than that; workers busy with their own batch would make the interrupt
    wait for them. So the workers die first, and terminate runs in a daemon thread that is given a
    few seconds; the shards already in the manifest are complete either way.
    """
    for process in workers:
        process.kill()
    stopper = threading.Thread(target=pool.terminate, name="andrea-pool-stop", daemon=True)
    stopper.start()
    stopper.join(timeout=_STOP_SECONDS)
