"""A peer on the same text: nanoGPT's own ``train.py`` and ANDREA, one shape, one split, one run.

nanoGPT's first experiment is character-level Shakespeare; its README's CPU configuration (4 layers, 4
heads, 128 wide, block 64, batch 12, 2000 iterations, dropout 0, ``device=cpu compile=False``) reaches a
validation loss of about 1.88 on tiny-shakespeare. Here both trainers read *our* English split — the
``shakespeare`` corpus's documents on each side of andrea-lab's own split (families kept whole, so a play's
two editions are on one side), each side's documents concatenated into one stream — so the two numbers
differ by the trainers and models, not by the data:

    python benchmarks/nanogpt_peer.py ~/src/nanoGPT                  # the README's 2000 iterations
    python benchmarks/nanogpt_peer.py ~/src/nanoGPT --max-iters 50   # a reduced run

1. The split is written once into a temporary directory in nanoGPT's ``shakespeare_char`` format
   (``train.bin``/``val.bin`` of uint16 character ids, ``meta.pkl`` with ``stoi``/``itos``, the vocabulary
   every character of the corpus, as its ``prepare.py`` makes it) and, with the same ids, as llm.c token
   files ANDREA reads directly (``data.corpus: english_train.bin``), beside a char-level ``tokenizer.json``
   for ANDREA with those ids (HF ``tokenizers``: a WordLevel model over single characters). andrea-lab's
   tokenizers reserve ``<|endoftext|>`` (last id) and this one maps an unseen character to ``[UNK]``: two ids
   past nanoGPT's, which neither side's data contains.
2. nanoGPT's ``train.py`` runs from the checkout (never copied into this project) with the temporary
   directory as its working directory (its ``data/`` and ``out_dir`` are there; nothing is written into the
   checkout), at the README's CPU configuration and ``--dtype=float32``.
3. ``andrea fit`` trains ANDREA at the same shape and optimiser settings (AdamW, lr 1e-3, betas (0.9, 0.99),
   weight decay 0.1, clip 1.0, warmup then cosine to 1e-4, no bias, init std 0.02 as nanoGPT's).

Printed side by side: each one's validation loss (nanoGPT: its own estimate at the last step, the mean
over ``eval_iters`` 20 random batches of val.bin; ANDREA: its held-out loss over 65,536 tokens of the same
val.bin, which is one stream, so no SE over documents) and steps per second (the median of each one's
per-step times: nanoGPT's ``iter`` lines, and the wall-clock gaps between ANDREA's per-step ``train/loss``
events; a step with an evaluation is an outlier the median drops).
Warmup is nanoGPT's 100 iterations in 2000, scaled with ``--max-iters`` (at least 1). The two run one after
the other, never together; ``--threads`` gives both the same thread count (on a shared machine, 1 is the
steadier comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.families import family_names
from andrea_lab.data.split import split_documents
from andrea_lab.data.token_file import write_token_file
from andrea_lab.data.tokenizer import END_OF_TEXT
from andrea_lab.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
#: nanoGPT's README CPU configuration (its command line, less --max_iters and --lr_decay_iters).
README_CPU = {
    "device": "cpu",
    "compile": "False",
    "eval_iters": "20",
    "log_interval": "1",
    "block_size": "64",
    "batch_size": "12",
    "n_layer": "4",
    "n_head": "4",
    "n_embd": "128",
    "dropout": "0.0",
    "dtype": "float32",
}
#: README_CPU's model and batch in ANDREA's keys, read from it rather than restated, so that both trainers train
#: one shape (benchmarks/step_overhead.py times ANDREA's step at it too). Bias off: nanoGPT's train.py default.
ANDREA_SHAPE = {
    "d_model": int(README_CPU["n_embd"]),
    "n_layer": int(README_CPU["n_layer"]),
    "n_head": int(README_CPU["n_head"]),
    "block_size": int(README_CPU["block_size"]),
    "bias": False,
    "dropout": float(README_CPU["dropout"]),
}
ANDREA_BATCH = int(README_CPU["batch_size"])
README_ITERS, README_WARMUP = 2000, 100
CHAR_TOKENIZER, UNKNOWN = "char_tokenizer.json", "[UNK]"
CHECKOUT_FILES = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py")
_EVAL = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)", re.MULTILINE)
_ITER = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", re.MULTILINE)


@dataclass(frozen=True)
class Result:
    """One trainer's line: its validation loss (and SE where it has one), steps per second, wall time."""

    name: str
    val_loss: float
    val_se: Optional[float]
    steps_per_s: float
    steps: int
    wall_s: float

    def line(self) -> str:
        se = f" ± {self.val_se:.3f}" if self.val_se is not None else ""
        return (
            f"{self.name:<8} val loss {self.val_loss:.4f}{se:<9} {self.steps_per_s:6.2f} steps/s (median step)   "
            f"{self.steps} steps, {self.wall_s:.0f} s wall"
        )


def english_split(corpus: str, val_fraction: float) -> tuple[str, str, dict]:
    """The corpus's train and held-out documents as andrea-lab splits them (families whole), each side's
    documents concatenated in corpus order, and what was split (documents, families, characters)."""
    resolved = resolve_corpus(corpus)
    names = resolved.relative_names()
    texts = [path.read_bytes() for path in resolved.files]
    families = family_names(names, texts, editions=resolved.editions)
    train, val = split_documents(names, val_fraction, families)
    train_text = "".join(texts[i].decode("utf-8") for i in train)
    val_text = "".join(texts[i].decode("utf-8") for i in val)
    facts = {"train_documents": len(train), "val_documents": len(val), "families": len(set(families))}
    return train_text, val_text, {**facts, "train_chars": len(train_text), "val_chars": len(val_text)}


def write_split(directory: Path, train_text: str, val_text: str) -> list[str]:
    """nanoGPT's ``shakespeare_char`` files in ``directory/data/andrea_english/``, the same ids as llm.c
    token files ``directory/english_{train,val}.bin`` and ANDREA's ``char_tokenizer.json``; returns the
    characters (id order)."""
    chars = sorted(set(train_text + val_text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = directory / "data" / "andrea_english"
    data.mkdir(parents=True)
    for side, text in (("train", train_text), ("val", val_text)):
        ids = np.fromiter((stoi[ch] for ch in text), dtype=np.uint16, count=len(text))
        ids.tofile(data / f"{side}.bin")
        write_token_file(directory / f"english_{side}.bin", ids)
    with open(data / "meta.pkl", "wb") as handle:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, handle)
    char_tokenizer(chars).save(str(directory / CHAR_TOKENIZER))
    return chars


def char_tokenizer(chars: Sequence[str]):
    """A tokenizer.json whose ids are the characters' (then ``[UNK]``, then ``<|endoftext|>``)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(chars)}
    vocab[UNKNOWN], vocab[END_OF_TEXT] = len(chars), len(chars) + 1
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNKNOWN))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])
    return tokenizer


def warmup_for(max_iters: int) -> int:
    return max(1, round(README_WARMUP * max_iters / README_ITERS))


def nanogpt_command(checkout: Path, max_iters: int) -> list[str]:
    settings = {
        **README_CPU,
        "dataset": "andrea_english",
        "out_dir": "out",
        "max_iters": str(max_iters),
        "lr_decay_iters": str(max_iters),
        "warmup_iters": str(warmup_for(max_iters)),
        "eval_interval": str(250 if max_iters % 250 == 0 else max_iters),  # an estimate at the last step
    }
    train = [str(checkout / "train.py"), str(checkout / "config" / "train_shakespeare_char.py")]
    return [sys.executable, *train, *(f"--{key}={value}" for key, value in settings.items())]


def run_nanogpt(checkout: Path, work: Path, max_iters: int, env: dict[str, str]) -> Result:
    """nanoGPT's train.py with ``work`` as its working directory: its ``exec(open('configurator.py'))``
    reads the checkout's file through a link there, its data and checkpoints stay there."""
    (work / "configurator.py").symlink_to(checkout / "configurator.py")
    started = time.perf_counter()
    done = subprocess.run(nanogpt_command(checkout, max_iters), cwd=work, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"nanoGPT's train.py failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return parse_nanogpt(done.stdout, wall)


def parse_nanogpt(stdout: str, wall_s: float) -> Result:
    """The last ``step N: ... val loss X`` line and the median of the ``iter N: ... time Tms`` lines."""
    evals, iters = _EVAL.findall(stdout), _ITER.findall(stdout)
    if not evals or not iters:
        raise SystemExit(f"nanoGPT's output has no 'step N: ... val loss' or 'iter N: ... time' line: {stdout[-400:]}")
    step_ms = statistics.median(float(ms) for _, ms in iters[1:] or iters)  # iter 0 carries the start-up
    return Result("nanoGPT", float(evals[-1][2]), None, 1000.0 / step_ms, int(iters[-1][0]), wall_s)


def andrea_command(work: Path, vocab_size: int, max_iters: int) -> list[str]:
    settings = {
        "data.corpus": work / "english_train.bin",
        "data.tokenizer": work / CHAR_TOKENIZER,
        "data.batch_size": ANDREA_BATCH,
        **{f"model.config.{key}": str(value).lower() for key, value in ANDREA_SHAPE.items()},
        "model.config.vocab_size": vocab_size,
        "model.config.init_std": 0.02,
        "model.lr": 1e-3,
        "model.betas": "[0.9,0.99]",
        "model.weight_decay": 0.1,
        "model.warmup_steps": warmup_for(max_iters),
        "model.min_lr_ratio": 0.1,
        "trainer.max_steps": max_iters,
        "trainer.val_check_interval": max_iters,
        "trainer.log_every_n_steps": 1,  # one train/loss event a step: its wall-clock gaps time the steps
        "trainer.logger.init_args.save_dir": work / "andrea-runs",
        "heldout.max_tokens": 65536,
    }
    arguments = [f"--{key}={value}" for key, value in settings.items()]
    return [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        str(REPO / "experiments/cpu-base.yaml"),
        *arguments,
    ]


def run_andrea(work: Path, vocab_size: int, max_iters: int, env: dict[str, str]) -> Result:
    """``andrea fit`` on the token files; its summary.json's held-out loss and its step times. Under ``env``, as
    nanoGPT: with ``os.environ`` instead, ``--threads 1`` reached nanoGPT only, and ANDREA ran at torch's default
    threads beside the machine's other work, several times slower a step (docs/performance.md, "Step overhead")."""
    started = time.perf_counter()
    command = andrea_command(work, vocab_size, max_iters)
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"andrea fit failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    (summary,) = (work / "andrea-runs").rglob("summary.json")
    record = json.loads(summary.read_text(encoding="utf-8"))
    heldout = record["heldout"]
    return Result("ANDREA", heldout["loss"], heldout["se"], 1.0 / median_step_s(summary.parent), record["steps"], wall)


def median_step_s(run_dir: Path) -> float:
    """The median wall-clock gap between consecutive steps' ``train/loss`` events (logged every step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # seconds to import

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = sorted((event.step, event.wall_time) for event in accumulator.Scalars("train/loss"))
    gaps = [(t2 - t1) / (s2 - s1) for (s1, t1), (s2, t2) in zip(events, events[1:]) if s2 > s1]
    if not gaps:
        raise SystemExit(f"{run_dir}: fewer than two train/loss events; cannot time a step")
    return statistics.median(gaps)


def checked_checkout(path: str) -> Path:
    """The nanoGPT checkout, or one line naming what it lacks (exit 2)."""
    checkout = Path(path).expanduser().resolve()
    missing = [name for name in CHECKOUT_FILES if not (checkout / name).is_file()]
    if missing:
        raise UsageLine(
            f"{path!r} is not a checkout of karpathy/nanoGPT (no {', '.join(missing)}); "
            "pass the directory that holds its train.py (git clone https://github.com/karpathy/nanoGPT)"
        )
    return checkout


class UsageLine(Exception):
    """Bad input: one line, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nanogpt", help="a checkout of karpathy/nanoGPT (its train.py is run from there)")
    parser.add_argument("--max-iters", type=int, default=README_ITERS, help="iterations for both (README: 2000)")
    parser.add_argument("--corpus", default="shakespeare", help="the corpus whose split both train on")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="as experiments/cpu-shakespeare.yaml")
    parser.add_argument(
        "--threads", type=int, help="OMP_NUM_THREADS for both trainers (default: torch's own, every core)"
    )
    parser.add_argument("--keep", help="write the data and runs here (a new directory) instead of a temporary one")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        checkout = checked_checkout(args.nanogpt)
        if args.max_iters < 2:
            raise UsageLine(f"--max-iters {args.max_iters}: give at least 2 (the README's is {README_ITERS})")
        if args.threads is not None and args.threads < 1:
            raise UsageLine(f"--threads {args.threads}: give at least 1")
        if args.keep and Path(args.keep).exists():
            raise UsageLine(f"--keep {args.keep} exists; give a new directory (nothing is written over)")
        with tempfile.TemporaryDirectory(prefix="nanogpt-peer-") as temporary:
            work = Path(args.keep) if args.keep else Path(temporary)
            work.mkdir(parents=True, exist_ok=True)
            train_text, val_text, facts = english_split(args.corpus, args.val_fraction)
            chars = write_split(work, train_text, val_text)
            print(f"split of {args.corpus} at val_fraction {args.val_fraction}: {facts}, {len(chars)} characters")
            print(f"nanoGPT README CPU shape: 4 layers, 4 heads, 128 wide, block 64, batch 12, {args.max_iters} iters")
            env = {**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
            results = [
                run_nanogpt(checkout, work, args.max_iters, env),
                run_andrea(work, len(chars) + 2, args.max_iters, env),
            ]
    except (UsageLine, UsageError) as problem:  # a corpus refused (unknown, offline, hash) is one line too
        print(f"error: {problem}", file=sys.stderr)
        return 2
    for result in results:
        print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
