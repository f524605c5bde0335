"""`andrea sweep SUITE.yaml`: run every variant x learning rate x seed of a suite, resumably.

Each run is ``python -m andrea_lab.cli fit --config BASE <overrides>`` in its own directory
``<runs-dir>/<suite>/<variant>/lr<lr>-seed<seed>/`` (``<runs-dir>/<suite>/<scale>/<variant>/...`` for a suite
with a scale axis) with ``seed_everything`` and ``data.seed`` set to the
seed, so every variant sees the same batches at the same seed (a paired comparison). Finished runs are
skipped; preempted ones resume from their checkpoint; other unfinished directories are moved aside and
rerun. By default each fit is forked from a warm worker that imported torch and Lightning once
(``--launcher warm``); ``--launcher local`` starts a fresh Python per fit, ``--launcher ray`` runs each
fit as a Ray task. A failed run does not stop the sweep; the exit
status is 1 if any run failed. See docs/experiments.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import yaml

from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare.floors import unconfirmable_claims
from andrea_lab.experiments.sweep import (
    fit_parser,
    from_table,
    grid_extension,
    ladder_compute,
    search_ledger,
    search_runs,
    speed_path,
)
from andrea_lab.experiments.sweep.executors import LocalExecutor, shared_threads
from andrea_lab.experiments.sweep.plan import plan_sweep, suite_runs_dir
from andrea_lab.experiments.sweep.preflight import preflight
from andrea_lab.experiments.sweep.runner import Runner, SweepLock, SweepLockedError, report
from andrea_lab.experiments.sweep.suite import (
    SuiteError,
    check_overrides,
    check_stuck_windows,
    format_lr,
    load_suite,
    parse_cli_list,
)
from andrea_lab.experiments.sweep.warm_executor import WarmExecutor
from andrea_lab.files import check_output_dir, refuse_links_below
from andrea_lab.runs.claim import RunDirectoryError, refuse_links
from andrea_lab.runs.directory import preempted_checkpoint, run_state, settings_difference

EXIT_FAILED_RUNS = 1
EXIT_USAGE = 2
EXIT_STOPPED = 130


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that carry a suite on from what an earlier sweep committed (its table, its search record)."""
    parser.add_argument(
        "--from-table",
        metavar="RUNS_CSV",
        help="extend a committed suite's LR grids (its extend_grid) without rerunning it: the planned runs' "
        "outcomes come from this runs.csv (e.g. docs/results/<suite>/runs.csv), one run a scale is rerun and "
        "must reproduce it to the bit, and only the runs it lacks and the added LRs run; then "
        "andrea compare runs/<suite> --from-table RUNS_CSV",
    )
    parser.add_argument(
        "--search-record",
        metavar="SEARCH_JSON",
        help="carry on a suite's search from an earlier session's committed <suite>/search.json: its points' "
        "losses stand for their tuning runs (one is rerun first and must reproduce its loss to the bit); the "
        "judged runs are made here",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="andrea sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", help="the suite YAML (see experiments/suites/)")
    parser.add_argument("--lrs", help="comma-separated learning rates instead of the suite's, e.g. 1e-3,3e-3")
    parser.add_argument("--seeds", help="comma-separated seeds instead of the suite's, e.g. 0,1")
    parser.add_argument("--variants", help="comma-separated variant names: run only these")
    parser.add_argument("--scales", help="comma-separated scale names of the suite's scale axis: run only these")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra common override for every run (repeatable), e.g. "
        "--set data.corpus=/data/fineweb_train_000001.bin; the value is read as YAML",
    )
    parser.add_argument(
        "--jobs", "-j", type=int, default=None, help="fits run at once (default 1, or one per --gpus entry)"
    )
    parser.add_argument(
        "--gpus",
        help="comma-separated CUDA device ids; each parallel fit gets one (CUDA_VISIBLE_DEVICES), e.g. 0,1,2,3",
    )
    parser.add_argument(
        "--runs-dir",
        default="runs",
        help="where suites' runs go: <runs-dir>/<suite>/<variant>/lr<lr>-seed<seed>/ (default: runs)",
    )
    add_record_arguments(parser)
    add_launcher_arguments(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (and what would be skipped or rerun) without running anything",
    )
    parser.add_argument(
        "--speed",
        choices=speed_path.SPEEDS,
        default="auto",
        help="bf16 and torch.compile per rung: auto (a measured rule: the CPU's bf16 units, the width, the steps; "
        "said on the first line), config (as the suite's configs say), or forced: fp32, bf16, bf16-compiled. "
        "A suite or --set naming trainer.precision or model.compile is never overridden",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip parsing every variant's command before the sweep starts (saves ~10 s)",
    )
    return parser


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how the fits run: the launcher and, under Ray, each run's resources."""
    parser.add_argument(
        "--launcher",
        choices=("warm", "local", "ray"),
        default="warm",
        help="warm: each fit forked on this machine from a worker that imported torch and "
        "Lightning once (default); local: each fit a fresh Python process; ray: one Ray task "
        "per run, on the cluster --ray-address or RAY_ADDRESS names, else a local Ray "
        "(docs/performance.md)",
    )
    parser.add_argument(
        "--ray-address",
        help="the Ray cluster to use, e.g. 10.0.0.1:6379 (default: RAY_ADDRESS, "
        "else a local Ray started for this sweep)",
    )
    parser.add_argument(
        "--cpus-per-run",
        type=float,
        help="CPUs each run holds under --launcher ray (default: the suite's resources.cpus, else 1)",
    )
    parser.add_argument(
        "--gpus-per-run",
        type=float,
        help="GPUs each run holds under --launcher ray (default: the suite's resources.gpus, else 0)",
    )


def parse_sets(items: list[str]) -> dict:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` (values read as YAML), checked like common overrides."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SuiteError(f"--set {item!r}: expected KEY=VALUE, e.g. --set trainer.max_steps=100")
        try:
            overrides[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            overrides[key.strip()] = value
    return check_overrides(overrides, "--set")


def make_executor(args: argparse.Namespace, suite, jobs: int, gpus, lock_fd, corpora=()):
    """The executor ``--launcher`` names, with the per-run resources of the command line, else the suite;
    ``corpora`` (from the preflight) are resolved once by each warm worker."""
    if args.launcher == "warm":
        return WarmExecutor(jobs, gpus, lock_fd=lock_fd, corpora=corpora)
    if args.launcher == "local":
        return LocalExecutor(jobs, gpus, lock_fd=lock_fd)
    # Ray (optional, seconds to import): only --launcher ray
    from andrea_lab.experiments.sweep.ray_executor import RayExecutor

    cpus = args.cpus_per_run if args.cpus_per_run is not None else suite.resources.get("cpus", 1.0)
    gpus_per_run = args.gpus_per_run if args.gpus_per_run is not None else suite.resources.get("gpus", 0.0)
    for flag, value in (("--cpus-per-run", cpus), ("--gpus-per-run", gpus_per_run)):
        if value < 0:
            raise SuiteError(f"{flag} must be a non-negative number, got {value}")
    return RayExecutor(address=args.ray_address, cpus=cpus, gpus=gpus_per_run)


def print_plan(specs, stale: dict | None = None) -> None:
    """``--dry-run``: what each run would do under the resume rule, and its command."""
    stale = stale or {}
    for spec in specs:
        if spec.run_dir in stale:
            print(
                f"{spec.counter} {spec.label}: refused, made with other settings ({stale[spec.run_dir]})\n"
                f"    {shlex.join(spec.command)}"
            )
            continue
        state = run_state(spec.run_dir)
        action = {
            "new": "run",
            "finished": "skip (finished)",
            "diverged": "skip (diverged)",
            "failed": "move aside (failed) and rerun",
            "interrupted": "move aside (interrupted) and rerun",
        }[state]
        checkpoint = preempted_checkpoint(spec.run_dir) if state in ("failed", "interrupted") else None
        if checkpoint is not None:
            action = f"resume from {checkpoint}"
        print(f"{spec.counter} {spec.label}: {action}\n    {shlex.join(spec.command)}")


def print_header(suite, specs, directory) -> None:
    """What the sweep is about to do: the grid (scales, variants, LRs, seeds), where its runs go, and how many
    runs extend_grid may add."""
    grid_lrs = sorted({s.lr for s in specs})
    grid_seeds = sorted({s.seed for s in specs})
    grid_scales = list(dict.fromkeys(s.scale for s in specs if s.scale is not None))
    at_scales = f"{len(grid_scales)} scales ({', '.join(grid_scales)}) x " if grid_scales else ""
    grids: dict[str, list[float]] = {}
    for spec in specs:
        grids.setdefault(spec.variant, [])
        if spec.lr not in grids[spec.variant]:
            grids[spec.variant].append(spec.lr)
    if len({tuple(sorted(grid)) for grid in grids.values()}) > 1:  # variants with LR grids of their own
        lrs = "; ".join(f"{name} {', '.join(format_lr(lr) for lr in sorted(grid))}" for name, grid in grids.items())
        variants_by_lrs = f"{len(grids)} variants at their own LRs ({lrs})"
    else:
        variants_by_lrs = f"{len(grids)} variants x {len(grid_lrs)} LRs ({', '.join(format_lr(lr) for lr in grid_lrs)})"
    print(
        f"suite {suite.name} ({suite.path}): {at_scales}{variants_by_lrs} x {len(grid_seeds)} seeds "
        f"({', '.join(map(str, grid_seeds))}) = {len(specs)} runs in {directory}",
        flush=True,
    )
    for line in per_scale_lines(specs):
        print(line, flush=True)
    for line in grid_extension.plan_lines(suite, specs):  # the runs extend_grid may add
        print(line, flush=True)


def per_scale_lines(specs) -> list[str]:
    """Each scale's runs, LRs and seeds, where the scales' grids differ (a ladder's top rung narrowed by
    ``ladder.grids``, LRs that extend_grid added at one rung): the header's LRs and seeds are the union over
    scales, and alone would read as if every rung ran all of them."""
    scales = list(dict.fromkeys(s.scale for s in specs if s.scale is not None))
    grids = {scale: [s for s in specs if s.scale == scale] for scale in scales}
    shapes = {(frozenset((s.variant, s.lr) for s in mine), frozenset(s.seed for s in mine)) for mine in grids.values()}
    if len(shapes) < 2:
        return []
    return [
        f"  {scale}: {len(mine)} runs, LRs {', '.join(format_lr(lr) for lr in sorted({s.lr for s in mine}))}, "
        f"seeds {', '.join(map(str, sorted({s.seed for s in mine})))}"
        for scale, mine in grids.items()
    ]


def _error(message: str) -> int:
    print(f"andrea sweep: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def refuse_existing_runs(specs, directory, dry_run: bool) -> Optional[int]:
    """The exit status when the sweep must not touch what is there (or the plan was printed), else None: a
    run directory inside a link, outside the suite's directory, or holding a link (the sweep writes its
    markers and sweep.log before the fit claims it), or runs made with other settings than these (neither
    counted done nor overwritten)."""
    try:
        # The suite's own directory under --runs-dir (the runs dir itself may be a link: the user chose it).
        parent = Path(os.path.realpath(directory.parent))
        refuse_links_below(parent / directory.name, parent / directory.name, "suite directory")
        for spec in specs:
            root = search_runs.root_of(spec.run_dir, directory)  # the suite's, or its search's tuning runs'
            refuse_links_below(root, spec.run_dir, "run directory")  # a linked variant or scale
            refuse_links(spec.run_dir)
    except (RunDirectoryError, UsageError) as exc:
        return _error(str(exc))
    stale = [
        (spec, difference) for spec in specs if (difference := settings_difference(spec.run_dir, list(spec.command)))
    ]
    if dry_run:
        print_plan(specs, {spec.run_dir: difference for spec, difference in stale})
        return 0
    if stale:
        spec, difference = stale[0]
        return _error(
            f"{len(stale)} run(s) in {directory} were made with other settings than this sweep's, e.g. "
            f"{spec.run_dir}: {difference}; a sweep neither counts them as done nor overwrites them: give "
            f"these settings their own --runs-dir, or move the old runs away"
        )
    return None


def plan(args: argparse.Namespace) -> tuple:
    """The suite, its planned runs (with LRs earlier sweeps added, the speed path, a search's next steps), the
    speed and compute lines, and the search's runner hook (None without a search); SuiteError when invalid."""
    suite = load_suite(args.suite)
    if suite.searches and (args.lrs is not None or args.seeds is not None):
        raise SuiteError(
            f"{suite.path}: --lrs and --seeds do not apply to a suite with search: (its variants' LRs and seeds "
            "are the search's); leave them out"
        )
    if args.set:
        suite = dataclasses.replace(suite, common={**suite.common, **parse_sets(args.set)})
        check_stuck_windows(suite)  # --set may have changed stability.stuck_after or the warmup
    lrs = parse_cli_list(args.lrs, "lrs") if args.lrs is not None else None
    seeds = parse_cli_list(args.seeds, "seeds") if args.seeds is not None else None
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    scales = [v.strip() for v in args.scales.split(",") if v.strip()] if args.scales else None
    specs = plan_sweep(suite, args.runs_dir, lrs=lrs, seeds=seeds, variants=variants, scales=scales)
    specs = grid_extension.with_recorded(suite, args.runs_dir, specs)  # LRs earlier sweeps added (extend_grid)
    # One speed path a rung: the runs a filter leaves out (--variants, --lrs, --seeds) count for it too.
    siblings = grid_extension.with_recorded(suite, args.runs_dir, plan_sweep(suite, args.runs_dir, scales=scales))
    table = None
    if args.from_table is not None:  # the planned runs a committed table holds are read from it (from_table)
        from_table.check_suite(suite)
        table = from_table.read_table(args.from_table, suite)
    tabled = from_table.precision_of(table) if table is not None else (lambda spec: None)  # its rungs keep its path
    specs, speed_line = speed_path.for_sweep(specs, args.speed, not args.no_check, siblings, tabled)
    speed_line = "\n".join(filter(None, [speed_line, *ladder_compute.for_sweep(suite, specs)]))  # ladder: 6·N·D
    ledger = search_ledger.read_ledger(args.search_record, suite) if args.search_record is not None else None
    searcher = search_runs.SearchRuns(suite, args.runs_dir, specs, ledger=ledger) if suite.searches else None
    specs = searcher.initial(specs) if searcher else specs  # a search's cells: their next step (search_runs)
    specs, table_plan = from_table.split(specs, table, args.from_table) if table is not None else (specs, None)
    return suite, specs, speed_line, searcher, table_plan


def threads_a_fit(args: argparse.Namespace, jobs: int) -> Optional[int]:
    """torch's threads in each local fit (OMP_NUM_THREADS where set, else the executor's rule:
    executors.shared_threads); None where torch chooses or Ray does."""
    if args.launcher == "ray":
        return None
    if "OMP_NUM_THREADS" in os.environ:
        threads = os.environ["OMP_NUM_THREADS"]
        return int(threads) if threads.isdigit() else None
    return shared_threads(jobs)


def make_extension(suite, args: argparse.Namespace, searcher, table_plan):
    """What the runner calls once no run is left: a search's next steps, then extend_grid (under --from-table,
    after its witnesses are checked); None when the suite has neither."""
    if table_plan is not None:
        from_table.write_record(suite_runs_dir(args.runs_dir, suite), table_plan)  # compare needs the table too
        extension = from_table.TableExtension(suite, args.runs_dir, table_plan)
    else:
        extension = grid_extension.GridExtension(suite, args.runs_dir) if suite.extend_grid else None
    if searcher is not None:  # the search's next steps first, then extend_grid on the other cells
        searcher.then, extension = extension, searcher
    return extension


def witness_refusal(table_plan, extension, searcher) -> Optional[str]:
    """Why the sweep stopped before its end: a witness that did not reproduce the committed table
    (``--from-table``) or search record (``--search-record``); None when none did."""
    if table_plan is not None and extension.refusal:
        return extension.refusal
    return searcher.refusal if searcher is not None else None


@fit_parser.shared()  # the speed rule, the ladder's compute and the preflight share one parser
def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        suite, specs, speed_line, searcher, table_plan = plan(args)
    except SuiteError as exc:
        return _error(str(exc))
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    jobs = args.jobs if args.jobs is not None else (len(gpus) if gpus else 1)
    if jobs < 1:
        return _error(f"--jobs must be at least 1, got {jobs}")
    if table_plan is not None and (problem := from_table.machine_problem(table_plan, threads_a_fit(args, jobs))):
        return _error(problem)  # --from-table on a machine that cannot rerun its runs to the bit
    directory = suite_runs_dir(args.runs_dir, suite)
    check_output_dir(directory, "--runs-dir")
    if speed_line:
        print(speed_line, flush=True)
    print_header(suite, table_plan.every(specs) if table_plan else specs, directory)
    for line in table_plan.lines() if table_plan else []:  # what is read from a committed table, what reruns
        print(line, flush=True)
    for line in search_runs.plan_lines(suite, specs):  # the runs a search may add, and its budget
        print(line, flush=True)
    for line in unconfirmable_claims(suite):  # before the runs, while seeds can still be added
        print(f"andrea sweep: warning: {suite.path.name}: {line}", file=sys.stderr, flush=True)

    corpora: list = []
    if not args.no_check:
        print("checking every variant's command line ...", flush=True)
        problems, corpora = preflight(specs)
        if problems:
            for problem in problems:
                print(f"andrea sweep: error: {suite.path.name}: {problem}", file=sys.stderr)
            return EXIT_USAGE

    refusal = refuse_existing_runs(table_plan.to_run(specs) if table_plan else specs, directory, args.dry_run)
    if refusal is not None:
        return refusal

    try:
        with SweepLock(directory) as lock:
            executor = make_executor(args, suite, jobs, gpus, lock.fd, corpora)
            if args.launcher == "ray" and args.jobs is None:
                jobs = len(specs)  # Ray queues every run and starts each when its resources are free
            extension = make_extension(suite, args, searcher, table_plan)
            runner = Runner(specs, jobs=jobs, executor=executor, extension=extension)
            outcomes = runner.run()
    except SweepLockedError as exc:
        return _error(str(exc))
    report(outcomes)
    if runner.stopping:
        return EXIT_STOPPED
    if (refusal := witness_refusal(table_plan, extension, searcher)) is not None:
        print(f"andrea sweep: error: {refusal}", file=sys.stderr)
        return EXIT_FAILED_RUNS
    if any(outcome.failed for outcome in outcomes):
        return EXIT_FAILED_RUNS
    print(f"compare them with: andrea compare {directory}")
    return 0
