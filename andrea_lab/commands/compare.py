"""`andrea compare RUNS`: the comparison itself. Its command line, and what the command does in words, are in
:mod:`andrea_lab.commands.compare_args`, kept apart so that ``andrea compare --help`` answers without importing
pandas, scipy, matplotlib and torch (3-5 s of imports on 2 cores; the dispatcher reads ``*_args`` modules).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Optional

from andrea_lab.commands.compare_args import build_parser
from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare import (
    compare,
    doc_blocks,
    domains,
    ladder,
    ladder_report,
    outputs,
    report,
    scales_report,
    search_budgets,
    speedups,
    table_merge,
)
from andrea_lab.experiments.compare.project import PROJECT, CommittedSuite, cited_variants, project_block
from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv
from andrea_lab.experiments.compare.tensorboard_report import comparison_run_dir, write_comparison_run
from andrea_lab.experiments.sweep import fit_parser, ladder_compute
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import Suite, SuiteError, load_suite
from andrea_lab.experiments.sweep.variant_compute import variant_setups
from andrea_lab.files import atomic_write, check_output_dir, read_json, read_text_file
from andrea_lab.runs.directory import START_MARKER

EXIT_USAGE = 2
#: Bytes a ``--doc`` Markdown file may have (docs/results.md is a few tens of KB).
MAX_DOC_BYTES = 16 << 20


def _error(message: str) -> int:
    print(f"andrea compare: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def recorded_suite(runs) -> Optional[Path]:
    """The suite file the sweep recorded in its ``sweep-run.json`` markers, if they agree on one."""
    files = set()
    for path in runs["path"].dropna():
        marker = read_json(Path(path) / START_MARKER) or {}
        if marker.get("suite_file"):
            files.add(marker["suite_file"])
    return Path(files.pop()) if len(files) == 1 else None


def write_tensorboard_run(suite_runs, result: dict, root: Path) -> Path:
    """The suite's report as the TensorBoard run beside its runs (andrea_lab.experiments.compare.tensorboard_report)."""
    images = {kind: path for kind, path in result["files"].items() if Path(path).suffix == ".png"}
    directory = comparison_run_dir(suite_runs["path"].dropna(), root)
    return write_comparison_run(directory, result["sections"], images)


def print_results(written: dict[str, dict]) -> None:
    """Each suite's variant and claims tables, its notes and the files written."""
    for suite_name, result in written.items():
        if "scales" in result:  # a suite with a scale axis: the trend (each scale's report is in its own folder)
            print(scales_report.summary_text(suite_name, result))
            continue
        print(f"## {suite_name}\n")
        print("\n".join(report.verdict_lines(result["variants"])) + "\n")
        print("\n".join(report.variants_tables(result["variants"])))
        if result["claims"] is not None:
            print("\n" + report.markdown_table(report.claim_columns(result["claims"]), result["claims"]))
        if result.get("calibration"):
            print("\n" + result["calibration"])
        for note in result["notes"]:
            print(f"- {note}")
        print()
        for kind, path in result["files"].items():
            print(f"  {kind:<15} {path}")
        print()


def ladder_blocks(suite: Suite, runs, out: Path) -> dict[str, str]:
    """The ladder's report written in ``out`` and its ``--doc`` blocks (``summary``, ``decisions``), its rungs'
    compute and planned runs read from the suite as the sweep plans it (only counted: no directory is read)."""
    specs = plan_sweep(suite, "runs")
    compute = {rung.rung: rung.flops for rung in ladder_compute.ladder_compute(suite, specs)}
    planned = ladder.planned_cells((spec.scale, spec.variant) for spec in specs)
    return ladder_report.report_blocks(suite, runs, out, compute, planned)


def scale_parameters(suite: Optional[Suite]) -> dict[str, int]:
    """Each scale's non-embedding parameters (the reference's model, counted as a ladder's rung) for the speed-up
    table of a suite whose scales are sizes at several budgets; {} for any other suite, or where its commands do not
    parse here (the table then says n/a)."""
    if suite is None or not speedups.sizes(suite.scales):
        return {}
    try:
        with fit_parser.shared():
            return {
                rung.rung: rung.parameters for rung in ladder_compute.ladder_compute(suite, plan_sweep(suite, "runs"))
            }
    except UsageError as exc:  # a SuiteError or ConfigError: the parameters are a column, not the comparison
        print(f"note: the speed-up table goes without parameter counts: {exc}", file=sys.stderr)
        return {}


def print_ladder(suite: Suite, runs, out: Path) -> tuple[Optional[int], dict[str, str]]:
    """The ladder's decision accuracy and scored prediction (issue 54), printed: an error's exit status (else
    None) and the blocks ``--doc`` writes."""
    try:
        blocks = ladder_blocks(suite, runs, out)
    except (ValueError, SuiteError) as exc:  # a prediction edited or committed late: PredictionError
        return _error(str(exc)), {}
    print(f"{blocks['summary']}\n\n{blocks['decisions']}\n")
    return None, blocks


def committed_suites(results: Path, suites: Path) -> list[CommittedSuite]:
    """Every ``<results>/<suite>/runs.csv`` whose suite file ``<suites>/<suite>.yaml`` exists, with its claims.

    The suites' paper setups are read through one shared ``andrea fit`` parser: built once (0.6 s) rather than
    once per variant read (32 builds were 18 of this function's 37 s here)."""
    found = []
    with fit_parser.shared():
        for runs_csv in sorted(results.glob("*/runs.csv")):
            found.extend(_committed_suite(runs_csv, suites))
    return found


def _committed_suite(runs_csv: Path, suites: Path) -> list[CommittedSuite]:
    """The committed suite of ``runs_csv`` (one), or none when its suite file is gone."""
    suite_file = suites / f"{runs_csv.parent.name}.yaml"
    if not suite_file.is_file():
        return []
    suite = load_suite(suite_file)
    aa, scaled = suite.identical_variants() is not None, bool(suite.scales)
    setups = variant_setups(suite, cited_variants(suite.claims))  # what a cited paper is held against
    top = suite.scales[-1].name if suite.ladder is not None and suite.scales else None
    corpora = domains.domain_axis(suite.scales)
    runs = search_budgets.with_recorded_edges(read_runs_csv(runs_csv), runs_csv)  # no claim judged on an edge
    return [CommittedSuite(suite.name, runs, tuple(suite.claims), aa, scaled, setups, top, corpora)]


def project_main(args: argparse.Namespace) -> int:
    """``andrea compare docs/results --project``: every committed suite's claims under the project rule."""
    results, suites = Path(args.runs), Path(args.suites)
    if not results.is_dir() or not any(results.glob("*/runs.csv")):
        return _error(f"--project: {args.runs!r} holds no <suite>/runs.csv (e.g. docs/results)")
    if not suites.is_dir():
        return _error(f"--suites {args.suites!r} is not a directory of suite files")
    try:
        committed = committed_suites(results, suites)
        blocks = {"claims": project_block(committed)}
        if (table := domains.project_domain_block(committed)) is not None:  # every verdict asked on two corpora
            blocks["domains"] = table
    except (SuiteError, ValueError) as exc:
        return _error(str(exc))
    print("\n\n".join(blocks.values()))
    if args.doc:
        update_doc(Path(args.doc), PROJECT, blocks)
    return 0


def search_budget_check(source: Path, runs, suite: Optional[Suite]) -> tuple[Any, Any, Optional[int]]:
    """Where the suite searched (``search.json``): each variant's tuning budget printed, the runs with a tuned value
    at an edge marked (no claim is judged on it), the budget table (None without a search: comparison.md's section)
    and the exit status when the budgets differ and the suite does not say ``unequal_budgets_ok: true`` (None: go
    on)."""
    try:
        searches = search_budgets.read_searches(source) if source.exists() else []
    except ValueError as exc:
        return runs, None, _error(str(exc))
    if not searches:
        return runs, None, None
    table = search_budgets.budgets(searches, runs)
    for line in search_budgets.lines(table):
        print(line)
    refused = search_budgets.refusal(table, bool(suite and suite.unequal_budgets_ok))
    return search_budgets.with_edges(runs, table), table, None if refused is None else _error(refused)


def suite_with_budgets(
    suite_file: Optional[Path], source: Path, runs
) -> tuple[Optional[Suite], Any, Any, Optional[int]]:
    """The suite (None without a file), the runs and budget table of :func:`search_budget_check`, and the exit
    status when the suite is invalid or its search's budgets are refused, else None."""
    try:
        suite = load_suite(suite_file) if suite_file is not None else None
    except SuiteError as exc:
        return None, runs, None, _error(str(exc))
    return (suite, *search_budget_check(source, runs, suite))


def _suite_file(args: argparse.Namespace, runs) -> Optional[Path]:
    """``--suite``, else the suite file the sweep recorded in its runs (None, with a note, where it is gone)."""
    suite_file = Path(args.suite) if args.suite else recorded_suite(runs)
    if not args.suite and suite_file is not None and not suite_file.exists():
        print(
            f"note: the suite file {suite_file} that the sweep recorded is gone (moved or renamed?): comparing "
            "without its reference and claims; pass --suite PATH to use them",
            file=sys.stderr,
        )
        return None
    return suite_file


def load_source(args: argparse.Namespace, source: Path) -> tuple[Any, Path]:
    """The runs to compare (with a committed table's under --from-table) and where the report goes; ValueError."""
    if source.is_file() and source.suffix == ".csv":
        runs, out = read_runs_csv(source), Path(args.out) if args.out else source.parent / "compare"
    elif source.is_dir():
        if args.from_table is None and (extended := table_merge.extended_tables(source)):
            directory, table = extended[0]
            raise ValueError(
                f"{directory} holds runs that extend the committed table {table} (andrea sweep --from-table); "
                f"alone they are part of a grid: andrea compare {directory} --from-table {table}"
            )
        runs, out = load_runs(source), Path(args.out) if args.out else source / "compare"
    else:
        raise ValueError(f"{args.runs!r} is neither a directory of runs nor a runs.csv")
    if args.from_table is not None and not runs.empty:  # a committed table and the runs that extended it
        runs = table_merge.merged(runs, args.from_table)
    return runs, out


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.project:
        return project_main(args)
    source = Path(args.runs)
    try:
        runs, out = load_source(args, source)
    except ValueError as exc:  # a file in a run that no reader may open (a FIFO as an event file); a bad merge
        return _error(str(exc))
    curves = source.is_dir() and args.from_table is None  # the table's runs have none: the statistics only
    check_output_dir(out, "--out")
    if runs.empty:
        return _error(f"no runs under {source} (a run directory holds TensorBoard event files or summary.json)")
    suite, runs, budgets, refused = suite_with_budgets(_suite_file(args, runs), source, runs)  # budgets checked
    if refused is not None:
        return refused
    reference = args.reference or (suite.reference if suite else None)
    claims = suite.claims if suite and not args.no_claims else ()
    if args.doc and args.no_claims:
        return _error("--doc writes the suite's claims block: it cannot be combined with --no-claims")
    aa_pair = suite.identical_variants() if suite else None
    known = compare.variant_order(runs)
    if reference is not None and reference not in known:
        return _error(
            f"reference variant {reference!r} has no runs here; pass --reference with one of: {', '.join(known)}"
        )
    if args.doc and runs["suite"].nunique() != 1:
        return _error(f"--doc needs the runs of one suite; found {', '.join(sorted(set(runs['suite'])))}")
    try:
        written = outputs.write_outputs(runs, out, reference, claims, aa_pair, budgets)
    except ValueError as exc:  # e.g. a claim names a variant these runs lack
        interim = " (a sweep still running? `--no-claims` gives an interim report without them)" if claims else ""
        return _error(str(exc) + interim)
    if args.tensorboard and curves:
        for suite_name, result in written.items():
            result["files"]["tensorboard"] = write_tensorboard_run(runs[runs["suite"] == suite_name], result, source)
    if budgets is not None and len(written) == 1:  # the record beside the table, so that its edges stay known
        search_budgets.keep_record(source, out)
    print_results(written)
    domain_table = domains.print_domain_report(suite, written)  # scales that are corpora: verdict x domain
    speedup_table = speedups.print_speedup_report(suite, runs, written, scale_parameters(suite))  # sizes x budgets
    ladder_doc: dict[str, str] = {}
    if suite is not None and suite.ladder is not None and suite.name in written:
        status, ladder_doc = print_ladder(suite, runs, out if len(written) == 1 else out / suite.name)
        if status is not None:
            return status
    if args.tensorboard and curves:
        print(f"the report beside the curves: tensorboard --logdir {source}  (run _comparison: TEXT and IMAGES)")
    if args.doc:
        blocks = outputs.doc_blocks(runs, claims, aa_pair)
        if domain_table is not None:
            blocks["domains"] = domain_table
        if speedup_table is not None:
            blocks["speedups"] = speedup_table
        blocks.update(ladder_doc)  # the ladder's summary opens docs/results.md; its table in its section
        update_doc(Path(args.doc), next(iter(written)), blocks)
    return 0


def update_doc(doc: Path, suite_name: str, blocks: dict[str, str]) -> None:
    write_doc_blocks(doc, suite_name, blocks)
    print(f"updated the {suite_name} {' and '.join(blocks) or 'no'} block(s) in {doc}")


def write_doc_blocks(doc: Path, suite_name: str, blocks: dict[str, str]) -> None:
    """Rewrite the suite's generated blocks (``{what: content}``) in ``doc`` through the atomic writer: a full
    disk or a crash leaves the user's document as it was, with its mode; a symbolic link, a FIFO, a device or
    markers that do not pair up are refused before anything is written (:class:`~andrea_lab.errors.UsageError`)."""
    if doc.is_symlink():  # the rename would put a file in the link's place, the file it names unchanged
        raise UsageError(
            f"--doc {doc} is a symbolic link (to {os.readlink(doc)}); andrea compare rewrites a document by "
            f"replacing it, which would replace the link. Pass the file it links to: --doc {doc.resolve()}"
        )
    text = read_text_file(doc, "--doc", MAX_DOC_BYTES) if os.path.lexists(doc) else ""
    updated = text
    try:
        for what, content in blocks.items():
            updated = doc_blocks.update_generated_block(updated, suite_name, what, content)
    except doc_blocks.GeneratedBlockError as exc:
        raise doc_blocks.GeneratedBlockError(f"--doc {doc}: {exc}") from None
    atomic_write(doc, lambda handle: handle.write(updated.encode("utf-8")))


def write_doc_block(doc: Path, suite_name: str, block: str) -> None:
    """The suite's claims block alone (:func:`write_doc_blocks`)."""
    write_doc_blocks(doc, suite_name, {"claims": block})
