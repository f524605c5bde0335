"""`andrea tokenize CORPUS --out DIR`: a corpus of any size into llm.c shards, in parallel, resumably.

An interruption (Ctrl-C, SIGTERM from a scheduler) stops at once; every shard already in the
manifest is complete, and running the same command again continues after them.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Optional

from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.parallel_encode import available_cores
from andrea_lab.data.tokenize_corpus import tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeOptions, TokenizeReport
from andrea_lab.files import check_output_dir

INTERRUPTED_EXIT_STATUS = 130


def build_parser() -> argparse.ArgumentParser:
    defaults = TokenizeOptions(workers=available_cores())
    parser = argparse.ArgumentParser(
        prog="andrea tokenize", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("corpus", help="JSONL(.gz/.zst), Parquet, a datasets directory, text files, a glob, or stdlib")
    parser.add_argument("--out", required=True, type=Path, help="the shard directory to write (or resume)")
    parser.add_argument(
        "--tokenizer",
        default=defaults.tokenizer,
        help="bpe (learn one on a sample), byte, or a tokenizer.json (e.g. GPT-2's)",
    )
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size, help="ids of the BPE to learn")
    parser.add_argument(
        "--sample-docs",
        type=int,
        default=defaults.sample_docs,
        help="training documents the BPE learns from (a seeded uniform sample)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seeds the BPE sample")
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=defaults.val_fraction,
        help="share of documents held out for validation (by a hash of each document's key)",
    )
    parser.add_argument("--shard-tokens", type=int, default=defaults.shard_tokens, help="tokens per shard")
    parser.add_argument(
        "--workers",
        type=int,
        default=defaults.workers,
        help="encoding processes (default: the cores this process may use; 0: encode in-process)",
    )
    parser.add_argument("--text-field", default="text", help="the JSONL field / Parquet column holding the text")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _raise_interrupt(signum: int, frame: Optional[FrameType]) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    options = TokenizeOptions(
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        sample_docs=args.sample_docs,
        seed=args.seed,
        val_fraction=args.val_fraction,
        shard_tokens=args.shard_tokens,
        workers=args.workers,
        progress=not args.no_progress,
    )
    options.check()
    check_output_dir(args.out, "--out")
    corpus = resolve_corpus(args.corpus, text_field=args.text_field)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        report = tokenize_corpus(corpus, args.out, options)
    except KeyboardInterrupt:
        print(
            f"andrea tokenize: interrupted; the shards listed in {args.out / 'manifest.json'} are complete. "
            "Run the same command again to resume after them.",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT_STATUS
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(format_report(report))
    return 0


def format_report(report: TokenizeReport) -> str:
    """The summary printed at the end: tokens, shards, bad records by reason with examples."""
    manifest = report.manifest
    totals = manifest.get("totals", {})
    if report.shards_written == 0 and report.shards_before:
        head = f"{report.directory}: already complete ({report.shards_before} shards); nothing to do"
    else:
        head = (
            f"{report.directory}: {report.shards_written} shards written"
            f"{f', {report.shards_before} kept from before' if report.shards_before else ''} "
            f"in {report.seconds:.1f} s"
        )
    lines = [
        head,
        f"  train: {totals.get('train_tokens', 0):,} tokens in {totals.get('train_shards', 0)} shards, "
        f"{totals.get('train_documents', 0):,} documents",
        f"  val:   {totals.get('val_tokens', 0):,} tokens in {totals.get('val_shards', 0)} shards, "
        f"{totals.get('val_documents', 0):,} documents",
        f"  tokenizer: {manifest['tokenizer']['vocab_size']} ids, sha256 {manifest['tokenizer']['sha256'][:16]}",
    ]
    bad = totals.get("bad_records", {})
    if bad:
        lines.append(
            f"  bad records skipped: {sum(bad.values()):,} of {totals.get('records', 0):,} ({json.dumps(bad)})"
        )
        for problem, keys in report.bad_examples.items():
            lines.append(f"    {problem}: e.g. {', '.join(keys)}")
    else:
        lines.append(f"  bad records: none of {totals.get('records', 0):,}")
    return "\n".join(lines)
