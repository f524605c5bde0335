"""`andrea compare RUNS`: one report per suite — every variant against a reference variant with paired
confidence intervals, the suite's claims evaluated, per-LR tables and plots — as Markdown and CSV.

RUNS is a sweep's suite directory (``runs/<suite>``), a directory of suites (``runs``), any directory of
``andrea fit`` runs, or a ``runs.csv`` an earlier compare wrote (the statistics only: no curves, no plots).
The reference variant and the claims come from the suite file (``--suite``, else the one the sweep
recorded in its runs); without one, the first variant is the reference and there are no claims.
``--doc FILE`` also rewrites the suite's generated blocks in FILE (docs/results.md): its claims and, for a
suite with two identical variants (an A/A check), the resampled false-positive rate.
Compared from run directories, the report is also written as the TensorBoard run ``<suite dir>/_comparison``
(tables in TensorBoard's Text dashboard, plots in Images) unless ``--no-tensorboard``.
Read docs/experiments.md for what the columns mean.
"""

from __future__ import annotations

import argparse

# The command line alone (argparse, nothing else): `andrea compare --help` is answered from this module without
# importing the comparison (andrea_lab.commands.compare), whose libraries take seconds to import.


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="andrea compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", help="a directory of runs (e.g. runs/norm_placement) or a runs.csv")
    parser.add_argument(
        "--out",
        help="where to write comparison.md/.csv, claims.csv, runs.csv and the PNGs "
        "(default: RUNS/compare; one subdirectory per suite if there are several)",
    )
    parser.add_argument(
        "--suite", help="the suite YAML whose reference and claims to use (default: the one the sweep recorded)"
    )
    parser.add_argument(
        "--reference",
        help="the variant every other one is compared with (default: the suite's reference, else the first variant)",
    )
    parser.add_argument(
        "--doc", help="a Markdown file whose generated blocks for this suite (claims, A/A calibration) are rewritten"
    )
    parser.add_argument(
        "--no-claims",
        action="store_true",
        help="leave the suite's claims out: an interim look at a sweep that is still running (its grids are "
        "not complete yet, so its claims would be judged on part of the runs, or refused)",
    )
    parser.add_argument(
        "--from-table",
        metavar="RUNS_CSV",
        help="RUNS extended a committed suite (andrea sweep --from-table): judge this runs.csv's runs and RUNS' as "
        "one suite, once every rerun of a table run in RUNS equals its row to the bit (the statistics only)",
    )
    parser.add_argument(
        "--project",
        action="store_true",
        help="RUNS is a results directory of committed suites (<dir>/<suite>/runs.csv, e.g. docs/results): judge "
        "every claim of every suite under the project's one error rule (confirmatory: Holm over the project; "
        "exploratory: BH q-values) and print the table; with --doc, rewrite its 'project claims' block",
    )
    parser.add_argument(
        "--suites",
        default="experiments/suites",
        help="with --project: where the suite files are (default: %(default)s)",
    )
    parser.add_argument(
        "--no-tensorboard",
        dest="tensorboard",
        action="store_false",
        help="do not also write the report as the TensorBoard run <suite dir>/_comparison "
        "(its tables in the Text dashboard, its plots in Images)",
    )
    return parser
