"""What a compile costs the first fit of a shape and a later one (issue 58: a compile paid once per shape).

``python benchmarks/compile_cache.py`` runs the same compiled ``andrea fit`` (default: experiments/cpu-base.yaml,
short) ``--fits`` times, one fresh process after another, against one new andrea-lab cache root, and reads from
each run's summary.json (``machine.compile``, andrea_lab.fit.compile_cache) the seconds it spent compiling and
its cache hits and misses, beside the fit's wall time. The first fit finds the cache empty (cold); the later
ones load what it compiled (warm). The goal: a later fit's compile under 10 % of the first's. The corpus is
tokenized into the new cache root by the first fit only (not counted: it is not compile time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

REPO = Path(__file__).resolve().parent.parent


def fit(args: argparse.Namespace, cache: Path, out: Path, number: int) -> dict:
    """One compiled fit in a fresh process; its compile record and wall time."""
    name = f"fit{number}"
    command = [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        args.config,
        "--model.compile",
        "true",
        "--trainer.max_steps",
        str(args.steps),
        "--trainer.logger.init_args.save_dir",
        str(out),
        "--trainer.logger.init_args.name",
        name,
        *args.extra,
    ]
    env = {**os.environ, "ANDREA_LAB_CACHE": str(cache), "OMP_NUM_THREADS": str(args.threads)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads(next((out / name).rglob("summary.json")).read_text())
    return {"fit": number, "wall_s": round(wall, 1), **summary["machine"]["compile"]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="experiments/cpu-base.yaml")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fits", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="more fit arguments, after --")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"compile cache: {args.fits} compiled fits of {args.config}, {args.steps} steps, {args.extra}; load {load}")
    rows = [fit(args, root / "cache", root / "runs", number) for number in range(args.fits)]
    table = pd.DataFrame(rows).drop(columns=["directory", "key", "reason"])
    table["compile_vs_first"] = (table["compile_s"] / table["compile_s"].iloc[0]).round(3)
    print(table.to_string(index=False))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
