"""Where a sweep's time goes, today's path against the improved one, in one invocation.

``python benchmarks/sweep_throughput.py`` plans a small slice of a real suite (default: two variants x
two learning rates x one seed of experiments/suites/norm_placement.yaml, i.e. cpu-base fits) and runs it
twice through :class:`andrea_lab.experiments.sweep.runner.Runner`, alternating which path goes first each round:

* **today**: ``--launcher local`` (a fresh Python per fit) with the in-training validation and sanity
  check of cpu-base.yaml before issue 29 (16 batches each);
* **improved**: ``--launcher warm`` (each fit forked from a worker that imported torch/Lightning and
  resolved the corpus once) with cpu-base.yaml as it is now.

Every fit carries :class:`benchmarks.sweep_phases.PhaseTimer`; from its stamps and the runner's own
(launch, exit) each run's wall time splits into start-up (launch to the first step, less the sanity
check), optimizer steps, validation (sanity check + in-training), other in-loop work (logging,
checkpoints, data), held-out evaluation and teardown (end of training to exit, less held-out). The
report gives those per run and per path, the share of wall time in optimizer steps, and the ratio of
runs per hour (sweep wall time, from the runner's start to its end; the preflight parse, which both
paths run alike, is not in it). Last, it checks that the two paths trained the same: every run's
``train/loss`` curve and held-out loss must be equal, to the bit, between today's run and the improved one
(the in-training validation reads the model, it never changes its training).

``--rungs cpu-base,d256,d512`` runs the slice at each of those model shapes (benchmarks/sweep_rungs.py) and ends
with one table of every rung and path side by side: fits per hour and against today's, the training and held-out
shares, seconds per step, and the fast path's step speed-up over today's fp32 step from its second fit on, as a
share of the bf16/fp32 ratio of a 512 x 512 matmul measured at the start and the end of the same run.
``--quick`` is a smoke of all that in minutes (3 steps, one variant, two seeds, today against fastest at
cpu-base, d256 and d512): its numbers are start-up, not throughput.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: andrea_lab is installed, benchmarks/ is not a package on the path
    sys.path.insert(0, str(REPO))

from andrea_lab.commands.sweep import parse_sets  # noqa: E402
from andrea_lab.experiments.compare.runs_table import read_scalars  # noqa: E402
from andrea_lab.experiments.sweep import speed_path  # noqa: E402
from andrea_lab.experiments.sweep.executors import LocalExecutor  # noqa: E402
from andrea_lab.experiments.sweep.plan import plan_sweep  # noqa: E402
from andrea_lab.experiments.sweep.preflight import preflight  # noqa: E402
from andrea_lab.experiments.sweep.runner import Runner  # noqa: E402
from andrea_lab.experiments.sweep.suite import load_suite, parse_cli_list  # noqa: E402
from andrea_lab.experiments.sweep.warm_executor import WarmExecutor  # noqa: E402
from andrea_lab.runs import tags  # noqa: E402
from andrea_lab.runs.directory import read_record  # noqa: E402
from benchmarks import sweep_rungs  # noqa: E402
from benchmarks.sweep_phases import PHASES_FILE  # noqa: E402

TIMER = "benchmarks.sweep_phases.PhaseTimer"
#: cpu-base.yaml's in-training validation and sanity check before issue 29: what "today" runs with.
TODAY_OVERRIDES = {"trainer.limit_val_batches": 16, "trainer.num_sanity_val_steps": 16, "data.max_val_batches": 16}
#: Path name -> (launcher, overrides, andrea sweep --speed). ``heldout-batched`` is the improved path with the
#: held-out evaluation in batches of 512 windows instead of the batch fit.eval_batch derives (on the CPU
#: 12-17 windows at cpu-base and d256; larger batches were measured slower: docs/performance.md); ``fastest``
#: is the sweep's default since issue 58 (warm workers, and bf16 and compile where
#: andrea_lab.experiments.sweep.speed_path's rule chooses them); ``bf16-compiled`` forces both.
PATHS = {
    "today": ("local", TODAY_OVERRIDES, "config"),
    "improved": ("warm", {}, "config"),
    "heldout-batched": ("warm", {"heldout.batch_size": 512}, "config"),
    "fastest": ("warm", {}, "auto"),
    "bf16-compiled": ("warm", {}, "bf16-compiled"),
}
PHASES = ["startup", "steps", "validation", "other", "heldout", "teardown"]


class TimedExecutor:
    """An executor as it is, plus the wall-clock time each run was launched and first seen ended."""

    def __init__(self, inner: Any):
        self.inner, self.name, self.launched = inner, inner.name, inner.launched
        self.times: dict[Path, list[float]] = {}
        self.close = getattr(inner, "close", lambda: None)

    def check_storage(self, directory: Path) -> None:
        self.inner.check_storage(directory)

    def launch(self, run_dir: Path, command: Sequence[str], marker: dict[str, Any], slot: int) -> Any:
        self.times[run_dir] = [time.time()]
        return run_dir, self.inner.launch(run_dir, command, marker, slot)

    def poll(self, handle: Any) -> Any:
        ended = self.inner.poll(handle[1])
        if ended is not None and len(self.times[handle[0]]) == 1:
            self.times[handle[0]].append(time.time())
        return ended

    def stop(self, handle: Any) -> None:
        self.inner.stop(handle[1])

    def kill(self, handle: Any) -> None:
        self.inner.kill(handle[1])


def plan(args: argparse.Namespace, path: str, out: Path, rung: Optional[dict[str, Any]] = None) -> list:
    """The benchmark's slice of the suite for one path at one rung's shape, with the timer and the path's
    overrides."""
    suite = load_suite(args.suite)
    common = {
        **suite.common,
        **(rung or {}),
        **parse_sets(args.set),
        **PATHS[path][1],
        "trainer.max_steps": args.steps,
        "trainer.callbacks+": TIMER,
    }
    suite = dataclasses.replace(suite, common=common)
    specs = plan_sweep(
        suite,
        out / path,
        lrs=parse_cli_list(args.lrs, "lrs"),
        seeds=parse_cli_list(args.seeds, "seeds"),
        variants=args.variants.split(","),
    )
    specs, line = speed_path.for_sweep(specs, PATHS[path][2])
    if line:
        print(f"{path}: {line}", flush=True)
    return specs


def run_path(
    args: argparse.Namespace, path: str, out: Path, corpora: list, rung: Optional[dict[str, Any]] = None
) -> dict[str, Any]:
    """One sweep through the path's executor; its wall time and every run's phases."""
    specs = plan(args, path, out, rung)
    started = time.time()
    launcher = PATHS[path][0]
    inner = WarmExecutor(args.jobs, corpora=corpora) if launcher == "warm" else LocalExecutor(args.jobs)
    executor = TimedExecutor(inner)
    log = io.StringIO()
    outcomes = Runner(specs, jobs=args.jobs, out=log, poll_s=0.05, executor=executor).run()
    wall = time.time() - started
    failed = [o.spec.label for o in outcomes if o.state not in ("finished", "diverged")]
    if failed:
        raise SystemExit(f"{path}: runs did not finish: {failed}\n{log.getvalue()}")
    rows = [phases(spec, executor.times[spec.run_dir], path) for spec in specs]
    return {"wall_s": wall, "runs": rows}


def phases(spec: Any, times: list[float], path: str) -> dict[str, Any]:
    """One run's wall time split into :data:`PHASES` (seconds) from its PhaseTimer stamps."""
    stamps = json.loads((spec.run_dir / PHASES_FILE).read_text())
    launch, end = times
    in_loop = stamps["train_end"] - stamps["train_start"]
    row = {
        "path": path,
        "run": spec.label,
        "startup": stamps["train_start"] - launch - stamps["sanity"],
        "steps": stamps["steps"],
        "validation": stamps["sanity"] + stamps["validation"],
        "other": in_loop - stamps["steps"] - stamps["validation"],
        "heldout": stamps["heldout"],
        "teardown": end - stamps["train_end"] - stamps["heldout"],
        "total": end - launch,
        "step_count": stamps["step_count"],
    }
    record = read_record(spec.run_dir)
    row["heldout_loss"] = None if record is None or record.heldout is None else record.heldout.loss
    row["train_loss_curve"] = read_scalars(spec.run_dir).get(tags.TRAIN_LOSS)
    machine = {} if record is None else record.machine
    compiled = machine.get("compile")
    row["arithmetic"] = f"{machine.get('precision')}{', compiled' if compiled else ''}"
    row["compile_s"] = compiled["compile_s"] if compiled else 0.0
    return row


def _number(value: Any) -> Optional[float]:
    return None if value is None or pd.isna(value) else float(value)


def same_training(runs: pd.DataFrame) -> bool:
    """Whether every run trained identically on every path of the same arithmetic (precision, compiled):
    equal train/loss curves and held-out loss. A path of other arithmetic is not bit-equal by design: its
    held-out loss is printed beside the first path's (its equivalence is a claim for precision_confirm)."""
    ok = True
    for label, group in runs.groupby("run", sort=False):
        first = group.iloc[0]
        for _, other in group.iloc[1:].iterrows():
            if other.get("arithmetic") != first.get("arithmetic"):
                print(
                    f"{label}: {first['path']} ({first['arithmetic']}) vs {other['path']} ({other['arithmetic']}): "
                    f"held-out loss {_number(first['heldout_loss'])!r} vs {_number(other['heldout_loss'])!r}"
                )
                continue
            same = (
                other["train_loss_curve"] == first["train_loss_curve"]
                and other["heldout_loss"] == first["heldout_loss"]
            )
            print(
                f"{label}: {first['path']} vs {other['path']}: train/loss curve and held-out loss "
                f"{'identical' if same else 'DIFFER'} ({_number(first['heldout_loss'])!r} vs "
                f"{_number(other['heldout_loss'])!r})"
            )
            ok = ok and same
    return ok


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> pd.DataFrame:
    """Per-run rows, per-path totals, and the runs-per-hour ratio, printed; the per-path frame returned."""
    runs = pd.DataFrame([row for result in results.values() for row in result["runs"]])
    pd.set_option("display.width", 200)
    print("\nper run (seconds):")
    columns = [c for c in ["path", "run", "arithmetic", *PHASES, "total", "compile_s"] if c in runs]
    print(runs[columns].round(2).to_string(index=False))
    totals = runs.groupby("path", sort=False)[PHASES + ["total"]].sum()
    totals["sweep_wall"] = [results[path]["wall_s"] for path in totals.index]
    totals["runs"] = runs.groupby("path", sort=False).size()
    # With --jobs N the sweep has N slots for the whole wall time: a share of wall time alone would exceed 1.
    slots = totals["sweep_wall"] * args.jobs
    totals["steps_share"] = totals["steps"] / slots
    totals["heldout_share"] = totals["heldout"] / slots
    totals["runs_per_hour"] = totals["runs"] / totals["sweep_wall"] * 3600
    arithmetic = runs.groupby("path", sort=False)["arithmetic"].first() if "arithmetic" in runs else None
    add_same_steps_rate(totals, arithmetic)
    sweep_rungs.add_step_times(totals, runs)
    print(
        "\nper path (seconds, summed over runs; steps_share, heldout_share = optimizer steps, held-out evaluation"
        f" / (sweep wall time x {args.jobs} job(s))):"
    )
    print(totals.round(3).to_string())
    for path in [p for p in totals.index if p != "today" and "today" in totals.index]:
        for column in ("runs_per_hour", "runs_per_hour_same_steps"):
            ratio = totals.loc[path, column] / totals.loc["today", column]
            print(f"\n{column}, {path} / today: {ratio:.2f}x")
    print()
    totals["same_training"] = same_training(runs)
    return totals


def add_same_steps_rate(totals: pd.DataFrame, arithmetic: Optional[pd.Series] = None) -> None:
    """``runs_per_hour_same_steps``: the rate had every path's optimizer steps taken their mean over the paths
    of one arithmetic. Those paths train identically, so a difference in their step time is the shared machine's
    load, not the path; this rate keeps only what the paths change (everything but the steps). A path of other
    arithmetic (bf16, compiled) changes the steps themselves: its steps are each arithmetic's own mean."""
    groups = arithmetic if arithmetic is not None else pd.Series("", index=totals.index)
    mean_steps = totals["steps"].groupby(groups).transform("mean")
    besides = totals["sweep_wall"] - totals["steps"]
    totals["runs_per_hour_same_steps"] = totals["runs"] / (besides + mean_steps) * 3600


def machine_line(args: argparse.Namespace) -> str:
    import platform

    import torch

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}; load average {load}"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default=str(REPO / "experiments/suites/norm_placement.yaml"))
    parser.add_argument("--variants", default="pre,post")
    parser.add_argument("--lrs", default="1e-3,4e-3")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--steps", type=int, default=250, help="trainer.max_steps of every fit (cpu-base: 250)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of every fit (1: right for a shared machine, docs/performance.md)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra override for every fit of both paths, as andrea sweep --set",
    )
    parser.add_argument("--rounds", type=int, default=1, help="each round runs both paths, alternating the order")
    parser.add_argument("--paths", default="today,improved", help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--out", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("--json", help="write the per-path totals here")
    parser.add_argument(
        "--rungs", default="cpu-base", help="comma-separated model shapes: cpu-base, the ladder's d64..d256, d512"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke in minutes (see above): not throughput")
    return parser


QUICK = {
    "variants": "pre",
    "lrs": "1e-3",
    "seeds": "0,1",
    "steps": 3,
    "paths": "today,fastest",
    "rungs": "cpu-base,d256,d512",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        vars(args).update(QUICK, set=[*args.set, "heldout.max_tokens=4096"])
    import tempfile

    out = Path(args.out or tempfile.mkdtemp(prefix="sweep-throughput-")).resolve()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    chosen = args.paths.split(",")
    if not set(chosen) <= set(PATHS):
        raise SystemExit(f"--paths {args.paths!r}: each must be one of {', '.join(PATHS)}")
    rungs = {name: sweep_rungs.rung_overrides(name) for name in args.rungs.split(",")}
    print(
        f"sweep throughput: {args.suite} variants {args.variants} x lrs {args.lrs} x seeds {args.seeds}, "
        f"{args.steps} steps, {args.jobs} job(s), {args.threads} thread(s), {args.rounds} round(s), paths {chosen}"
        f", rungs {list(rungs)}{', overrides ' + str(args.set) if args.set else ''}; runs in {out}"
    )
    print(machine_line(args))
    matmul = [sweep_rungs.matmul_ratio(threads=args.threads)]
    by_rung = {
        rung: run_rung(args, chosen, out if len(rungs) == 1 else out / rung, shape) for rung, shape in rungs.items()
    }
    matmul.append(sweep_rungs.matmul_ratio(threads=args.threads))
    print(machine_line(args).replace("machine:", "at end:"))
    totals = pd.concat(by_rung, names=["rung"])
    if len(rungs) > 1 or args.quick or (sweep_rungs.TODAY in chosen and len(chosen) > 1):
        table = sweep_rungs.side_by_side(by_rung, sum(matmul) / 2)
        print(
            "\nevery rung side by side (bf16/fp32 matmul 512^3 in this run: "
            f"{matmul[0]:.2f}x at start, {matmul[1]:.2f}x at end):"
        )
        print(table.round(3).to_string())
    if args.json:
        Path(args.json).write_text(totals.reset_index().to_json(orient="records", indent=1))
    return 0 if totals["same_training"].all() else 1


def run_rung(args: argparse.Namespace, chosen: list[str], out: Path, shape: dict[str, Any]) -> pd.DataFrame:
    """Every path at one rung, alternating their order each round; the rung's per-path totals (report)."""
    problems, corpora = preflight(plan(args, chosen[0], out / "plan", shape))
    if problems:
        raise SystemExit("; ".join(problems))
    results: dict[str, dict[str, Any]] = {}
    for round_ in range(args.rounds):
        for path in chosen if round_ % 2 == 0 else chosen[::-1]:
            result = run_path(args, path, out / f"round{round_}", corpora, shape)
            merged = results.setdefault(path, {"wall_s": 0.0, "runs": []})
            merged["wall_s"] += result["wall_s"]
            merged["runs"] += result["runs"]
            print(f"round {round_}: {path} took {result['wall_s']:.1f} s", flush=True)
    return report(results, args)


if __name__ == "__main__":
    sys.exit(main())
