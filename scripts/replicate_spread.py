"""How far apart two runs of the same config and seed end, beside the spread across seeds, per variant and LR.

    andrea sweep experiments/suites/init_scale.yaml -j 2 --variants init_0.02,init_0.125      # 1 thread each
    andrea sweep experiments/suites/init_scale.yaml -j 1 --variants init_0.02,init_0.125 --runs-dir runs/threads2
    python scripts/replicate_spread.py runs/init_scale runs/threads2/init_scale

The scores are the primary held-out score (document-weighted; token-weighted for older runs). The table
docs/experiments.md quotes ("Noise") is this script's output (andrea_lab.experiments.compare.replicates).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from andrea_lab.errors import run_script
from andrea_lab.experiments.compare.replicates import replicate_rows
from andrea_lab.runs.directory import format_lr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a suite's runs directory: <first>/<variant>/lr<lr>-seed<seed>/")
    parser.add_argument("second", type=Path, help="the same runs made again (other launcher, thread count...)")
    args = parser.parse_args(argv)
    for path in (args.first, args.second):
        if not path.is_dir():
            print(f"replicate_spread: error: {path} is not a directory of runs", file=sys.stderr)
            return 2
    rows = replicate_rows(args.first, args.second)
    if not rows:
        print(f"replicate_spread: error: no run in {args.second} matches one in {args.first}", file=sys.stderr)
        return 2
    print("| variant | LR | pairs | bit-identical | max abs difference | replicate sd | seed sd |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        seed_sd = f"{row.seed_sd:.4f}" if row.seed_sd is not None else "-"
        print(
            f"| {row.variant} | {format_lr(row.lr)} | {row.pairs} | {row.identical}/{row.pairs} | "
            f"{row.max_abs_difference:.2e} | {row.replicate_sd:.2e} | {seed_sd} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, sys.argv[1:], "replicate_spread"))  # bad input: one line, exit 2
