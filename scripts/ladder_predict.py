"""Write a ladder's prediction of its top rung from its finished lower rungs, before the top rung runs (issue 54).

  python scripts/ladder_predict.py runs/ladder experiments/suites/ladder.yaml experiments/suites/ladder.prediction.json
  python scripts/ladder_predict.py docs/results/ladder/runs.csv experiments/suites/ladder.yaml OUT.json  # committed

Every rung below the top must have all its planned runs finished (a partial rung would make a partial trend).
The prediction (each variant's held-out loss and each decision's effect and sign at the top rung's 6·N·D, with
standard errors: compare.ladder_trends) is written once, never over an existing file; the script prints its
sha256 and the ``ladder.prediction`` entry to put in the suite. Commit both before the top rung's first run:
``andrea compare`` refuses a prediction whose hash differs or whose last commit is later than that run's start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from andrea_lab.errors import UsageError, run_script
from andrea_lab.experiments.compare import ladder, ladder_predictions
from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv
from andrea_lab.experiments.sweep import ladder_compute
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import load_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", type=Path, help="the ladder's runs directory (runs/<suite>) or its runs.csv (docs/results/<suite>)"
    )
    parser.add_argument("suite", type=Path, help="the ladder suite file")
    parser.add_argument("out", type=Path, help="the prediction file to write (JSON; must not exist)")
    args = parser.parse_args(argv)
    from_csv = args.runs.is_file() and args.runs.suffix == ".csv"
    if not args.runs.is_dir() and not from_csv:
        raise UsageError(
            f"{args.runs} is not a directory; give the ladder's runs directory, e.g. runs/ladder, or its runs.csv"
        )
    suite = load_suite(args.suite)
    if suite.ladder is None:
        raise UsageError(f"{args.suite} has no ladder: section; a prediction is of a ladder's top rung")
    specs = plan_sweep(suite, "runs")  # only counted
    compute = {rung.rung: rung.flops for rung in ladder_compute.ladder_compute(suite, specs)}
    rungs = [scale.name for scale in suite.scales]
    runs = read_runs_csv(args.runs) if from_csv else load_runs(args.runs)
    done = ladder.finished_rungs(runs, rungs[:-1], ladder.planned_cells((s.scale, s.variant) for s in specs))
    if done != rungs[:-1]:
        missing = ", ".join(rung for rung in rungs[:-1] if rung not in done)
        raise UsageError(f"rungs {missing} of {args.runs} are not finished; a prediction needs every lower rung")
    decisions = [ladder.Decision(a, b) for a, b in suite.ladder.decisions]
    prediction = ladder_predictions.make_prediction(runs, rungs[:-1], compute, decisions, rungs[-1], suite.name)
    digest = ladder_predictions.write_prediction(args.out, prediction)
    print(f"wrote {args.out} (sha256 {digest}); add to {args.suite.name} and commit both before the top rung runs:")
    print(f"  prediction: {{file: {args.out.name}, sha256: {digest}}}")
    print_brackets(prediction, suite, decisions, rungs[-1])
    return 0


def print_brackets(prediction: dict, suite, decisions: list, top: str) -> None:
    """Each variant's bracket at the top rung, then the same with every variant whose extrapolated optimum lies
    inside the reference's bracket moved onto it, and the decisions left with fewer than two LRs in common.
    Why the second: LR sensitivity and the highest LR that trains are compared on the LRs both variants ran
    (compare.ladder), and brackets 1.25-2x apart share none, so the top rung would have no stability decision."""
    fitted = top_bracket(prediction["log10_best_lrs"])
    bracket = {v.name: fitted[v.name] for v in suite.variants if v.name in fitted}  # in the suite's order
    if not bracket:
        return
    print(f"each variant's best LR extrapolated to {top}, as a bracket 2x either side (ladder.grids lrs):")
    print(f"  lrs: {_yaml(bracket)}")
    trends = prediction["log10_best_lrs"]
    spread = ", ".join(
        f"{name} ± {trends[name]['se']:.2f}" if trends[name].get("se") is not None else f"{name} ± n/a"
        for name in bracket
    )
    print(f"  the trend's standard error in decades of LR (a bracket narrower than it may miss): {spread}")
    shared = shared_brackets(bracket, suite.reference)
    print(f"with every optimum inside {suite.reference}'s bracket on that bracket, so decisions keep common LRs:")
    print(f"  lrs: {_yaml(shared)}")
    apart = [d.name for d in decisions if len(set(shared.get(d.a, ())) & set(shared.get(d.b, ()))) < 2]
    if apart:
        print(f"  compared on loss only at {top} (fewer than 2 LRs in common): {', '.join(apart)}")


def _yaml(bracket: dict[str, list[float]]) -> str:
    return "{" + ", ".join(f"{name}: [{', '.join(f'{lr:.1e}' for lr in lrs)}]" for name, lrs in bracket.items()) + "}"


def shared_brackets(bracket: dict[str, list[float]], reference: str | None) -> dict[str, list[float]]:
    """``bracket`` with each variant whose own optimum (its bracket's middle) lies within the reference's
    bracket given the reference's: the optimum is still bracketed, and the pair shares every LR."""
    if reference not in bracket:
        return dict(bracket)
    low, high = bracket[reference][0], bracket[reference][-1]
    return {name: bracket[reference] if low <= lrs[1] <= high else lrs for name, lrs in bracket.items()}


def top_bracket(log10_best_lrs: dict) -> dict[str, list[float]]:
    """Per variant with a fitted best-LR trend: half, one and two times the extrapolated best LR, at two
    significant figures (a bracket: the optimum is inside it if the trend is right within a factor of 2)."""
    bracket = {}
    for name, fitted in log10_best_lrs.items():
        if fitted.get("value") is not None:
            best = float(f"{10 ** fitted['value']:.1e}")
            bracket[name] = [float(f"{best * factor:.1e}") for factor in (0.5, 1.0, 2.0)]
    return bracket


if __name__ == "__main__":
    sys.exit(run_script(main, sys.argv[1:], "ladder_predict"))  # bad input: one line, exit 2
