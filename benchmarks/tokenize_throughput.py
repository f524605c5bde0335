"""How fast `andrea tokenize` turns text into shards, how much memory it needs, and how fast the loader
reads the shards back: the numbers docs/performance.md ("Data") quotes.

1. **Throughput**: one corpus encoded by HF ``tokenizers``' own ``encode_batch_fast`` (in this
   process; its Rayon threads use every core) and by the shard pipeline with 1 and N worker
   processes, tokens/s each and the ratios, all in one run.
2. **Peak memory**: the pipeline in a fresh process at 1x and 4x a corpus (the issue's goal: under
   ~100 MB apart), main process and workers separately.
3. **Loader**: tokens/s ``AndreaDataModule`` serves from the shards at batch 16 x 1024 (ANDREA-120M's
   micro-batch), against the ~1M tokens/s one H100 consumes training ANDREA-120M.

The corpora are JSONL built from this machine's standard library (repeated with a copy number in each
document, so no download). Example: ``python benchmarks/tokenize_throughput.py --mb 16 --memory-mb 24``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.parallel_encode import available_cores
from andrea_lab.data.tokenize_corpus import make_tokenizer, tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeOptions
from andrea_lab.data.tokenizer import save_tokenizer

H100_TOKENS_PER_S = 1_000_000

#: Peak memory is each process's ``VmHWM`` (the high-water mark of its own address space), not
#: ``getrusage``'s ``ru_maxrss``: Linux carries the parent's high-water mark across fork and exec into
#: ``ru_maxrss``, so a child of a large process would report the parent's size. Workers are sampled
#: while they live (their ``VmHWM`` only grows, so the last reading before they exit is their peak).
_MEMORY_CHILD = """
import json, multiprocessing, sys, threading
from pathlib import Path
from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.tokenize_corpus import tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeOptions

def high_water_mb(pid='self'):
    try:
        with open(f'/proc/{pid}/status') as status:
            return next(int(line.split()[1]) for line in status if line.startswith('VmHWM')) / 1024
    except (OSError, StopIteration):
        return 0.0

workers_peak, done = {}, threading.Event()
def sample():
    while not done.wait(0.1):
        for child in multiprocessing.active_children():
            workers_peak[child.pid] = max(workers_peak.get(child.pid, 0.0), high_water_mb(child.pid))

if __name__ == '__main__':
    corpus, out, tokenizer, workers = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    threading.Thread(target=sample, daemon=True).start()
    options = TokenizeOptions(tokenizer=tokenizer, workers=workers, progress=False, shard_tokens=10_000_000)
    report = tokenize_corpus(resolve_corpus(corpus), out, options)
    done.set()
    totals = report.manifest['totals']
    print(json.dumps({'main_mb': high_water_mb(), 'worker_mb': max(workers_peak.values(), default=0.0),
                      'tokens': totals['train_tokens'] + totals['val_tokens']}))
"""


def build_corpus(path: Path, megabytes: float) -> Path:
    """JSONL of standard-library modules, repeated (each copy numbered) until ``megabytes`` of text."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    texts = [file.read_text(encoding="utf-8", errors="replace") for file in files[:2000]]
    target, written, copy = megabytes * 1e6, 0, 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            for text in texts:
                line = json.dumps({"text": f"# copy {copy}\n{text}"}) + "\n"
                handle.write(line)
                written += len(line)
                if written >= target:
                    break
            copy += 1
    return path


def throughput(corpus_path: Path, tokenizer_path: Path, workers: int, tmp: Path) -> dict[str, float]:
    """Tokens/s of encode_batch_fast alone and of the pipeline at 1 and ``workers`` processes."""
    from andrea_lab.data.tokenizer import load_tokenizer

    corpus = resolve_corpus(str(corpus_path))
    texts = [record.text for record in corpus.iter_records() if record.text]
    tokenizer = load_tokenizer(tokenizer_path)
    started = time.perf_counter()
    tokens = sum(len(e.ids) + 1 for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False))
    results = {"encode_batch": tokens / (time.perf_counter() - started)}
    del texts
    for count in sorted({1, workers}):
        options = TokenizeOptions(tokenizer=str(tokenizer_path), workers=count, progress=False, val_fraction=0.05)
        started = time.perf_counter()
        manifest = tokenize_corpus(corpus, tmp / f"w{count}", options).manifest
        done = manifest["totals"]["train_tokens"] + manifest["totals"]["val_tokens"]
        results[f"pipeline_{count}w"] = done / (time.perf_counter() - started)
    return results


def peak_memory(corpus_path: Path, tokenizer_path: Path, workers: int, out: Path) -> dict[str, float]:
    """The pipeline's peak resident memory in a fresh process (main and, separately, its largest worker)."""
    command = [sys.executable, "-c", _MEMORY_CHILD, str(corpus_path), str(out), str(tokenizer_path), str(workers)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def loader_tokens_per_s(shards: Path, vocab_size: int, batches: int) -> float:
    """Tokens/s AndreaDataModule's training loader yields from the shards (batch 16 x 1024, no workers)."""
    from andrea_lab.data import AndreaDataModule

    dm = AndreaDataModule(
        corpus=str(shards), batch_size=16, block_size=1024, vocab_size=vocab_size, samples_per_epoch=(batches + 1) * 16
    )  # windows may repeat: speed, not coverage
    dm.prepare_data()
    dm.setup()
    loader = iter(dm.train_dataloader())
    next(loader)
    started = time.perf_counter()
    for _ in range(batches):
        next(loader)
    return batches * 16 * 1024 / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=16, help="corpus size for the throughput comparison")
    parser.add_argument("--memory-mb", type=float, default=110, help="the 1x corpus of the memory test (4x is 4 times)")
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--vocab-size", type=int, default=8449)
    parser.add_argument("--loader-batches", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="andrea-tokbench-") as name:
        tmp = Path(name)
        corpus_path = build_corpus(tmp / "bench.jsonl", args.mb)
        options = TokenizeOptions(vocab_size=args.vocab_size, sample_docs=2000, workers=0, progress=False)
        tokenizer_path = tmp / "tokenizer.json"
        save_tokenizer(make_tokenizer(resolve_corpus(str(corpus_path)), options), tokenizer_path)
        results = {"cores": available_cores(), "workers": args.workers, "mb": args.mb}
        results["tokens_per_s"] = throughput(corpus_path, tokenizer_path, args.workers, tmp)
        results["memory"] = {}
        for factor in (1, 4):
            path = build_corpus(tmp / f"mem{factor}.jsonl", args.memory_mb * factor)
            results["memory"][f"{factor}x_{args.memory_mb * factor:g}MB"] = peak_memory(
                path, tokenizer_path, args.workers, tmp / f"mem{factor}"
            )
            path.unlink()
        loader = loader_tokens_per_s(tmp / f"w{args.workers}", args.vocab_size, args.loader_batches)
        results["loader_tokens_per_s"] = loader
        results["loader_vs_h100_120m"] = loader / H100_TOKENS_PER_S
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
