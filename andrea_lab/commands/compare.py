"""`andrea compare RUNS_DIR`: one table per suite (a row per variant), as Markdown and CSV, plus plots.

RUNS_DIR is a sweep's suite directory (``runs/<suite>``), a directory of suites (``runs``), or any
directory of ``andrea fit`` runs. Runs are grouped by variant (the directory layout ``andrea sweep``
writes, ``<suite>/<variant>/lr<lr>-seed<seed>/``). Read docs/experiments.md for what the columns mean.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from andrea_lab.analysis.compare import SUMMARY_COLUMNS, load_runs, markdown_table, summary_rows, write_outputs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="andrea compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dir", help="a directory of runs (e.g. runs/norm_placement)")
    parser.add_argument("--out", help="where to write comparison.md/.csv, runs.csv and the PNGs "
                                      "(default: RUNS_DIR/compare; one subdirectory per suite if there are several)")
    args = parser.parse_args(argv)
    root = Path(args.runs_dir)
    if not root.is_dir():
        print(f"andrea compare: error: {args.runs_dir!r} is not a directory", file=sys.stderr)
        return 2
    records = load_runs(root)
    if not records:
        print(f"andrea compare: error: no runs under {root} (a run directory holds TensorBoard event files or "
              "summary.json)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else root / "compare"
    written = write_outputs(records, out)
    for suite, result in written.items():
        print(f"## {suite}\n")
        print(markdown_table(SUMMARY_COLUMNS, summary_rows(result["summaries"])))
        for note in result["notes"]:
            print(f"- {note}")
        print()
        for kind, path in result["files"].items():
            print(f"  {kind:<15} {path}")
        print()
    return 0
