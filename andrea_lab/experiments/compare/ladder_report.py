"""What ``andrea compare`` adds for a suite with a ``ladder:``: the decision-accuracy table and, once the top
rung has finished, the recorded prediction scored (issue 54).

The rungs' compute (6·N·D) and the runs each rung plans come from the suite itself, planned as the sweep plans
it (``andrea compare`` reads them with :mod:`andrea_lab.experiments.sweep.ladder_compute`, handed in here: the
compare package does not import the sweep's), so a rung with fewer finished runs than planned is reported
missing (:func:`andrea_lab.experiments.compare.ladder.decision_accuracy`), never scored from part of its seeds.
Written beside the usual report: ``ladder.md``, ``decision_accuracy.csv`` and ``.png``, ``trends.csv`` and
``.png`` (``predictions_scored.csv``).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd

from andrea_lab.experiments.compare import (
    compare,
    csv_cells,
    ladder,
    ladder_predictions,
    ladder_summary,
    ladder_trend_report,
    ladder_trends,
)
from andrea_lab.experiments.compare.runs_table import SCALE, STARTED
from andrea_lab.runs.directory import START_TIME_FORMAT


def top_started(runs: pd.DataFrame, top: str) -> Optional[datetime]:
    """When the top rung's first run started: the earliest ``started`` of its runs (the sweep's ``sweep-run.json``,
    kept in runs.csv, so a committed table is scored as its run directories would be); None when no run
    recorded it."""
    if STARTED not in runs:
        return None
    times = []
    for text in runs.loc[runs[SCALE] == top, STARTED].dropna():
        try:
            times.append(datetime.strptime(str(text), START_TIME_FORMAT))
        except ValueError:  # a handed table's cell that is not the sweep's time: not a start time
            continue
    return min(times).astimezone(timezone.utc) if times else None


def _scored(suite: Any, runs: pd.DataFrame, table: pd.DataFrame, out: Path) -> list[str]:
    """The prediction scored, or why not (none recorded; top rung not finished)."""
    top, record = suite.scales[-1].name, suite.ladder
    if record.prediction is None:
        return ["No prediction recorded (ladder.prediction): nothing to score."]
    if (table.loc[table["rung"] == top, "status"] != "top").any():
        return [f"Top rung {top} not finished: the prediction {record.prediction.name} is not scored yet."]
    started = top_started(runs, top)
    prediction = ladder_predictions.read_checked(record.prediction, record.prediction_sha256, started)
    decisions = [ladder.Decision(a, b) for a, b in record.decisions]
    scored = ladder_predictions.score(prediction, *ladder_predictions.measured(runs, top, decisions))
    csv_cells.write_csv(scored, out / "predictions_scored.csv")
    committed = ladder_predictions.committed_at(record.prediction)
    lines = [
        f"Prediction {record.prediction.name}, sha256 {record.prediction_sha256}, last committed "
        f"{committed.isoformat() if committed else 'never (not in git)'}; top rung's first run started "
        f"{started.isoformat() if started else 'unknown (no run recorded its start)'}.",
        "",
        "| kind | name | predicted ± se | top rung | error (nats; decades for log10_best_lr) | sign right |",
        "|---|---|---|---|---|---|",
    ]
    for row in scored.itertuples():
        se = "" if row.se is None or (isinstance(row.se, float) and math.isnan(row.se)) else f" ± {row.se:.3f}"
        predicted = "—" if row.predicted is None else f"{row.predicted:+.3f}{se}"
        sign = "" if row.sign_right is None else ("yes" if row.sign_right else "no")
        lines.append(f"| {row.kind} | {row.name} | {predicted} | {row.actual:+.3f} | {row.error:+.3f} | {sign} |")
    return lines


def _trend_lines(
    runs: pd.DataFrame, table: pd.DataFrame, compute: Mapping[str, float], decisions: list, out: Path
) -> list[str]:
    """The trends fitted on the finished rungs (``trends.csv``, ``trends.png``), as Markdown lines."""
    # matplotlib (~1 s): only when the report is written
    from andrea_lab.experiments.compare.plots_ladder import plot_trends

    finished, top = ladder.finished_in(table), str(table["rung"].iloc[-1])
    points = ladder_trends.ladder_points(runs, finished, compute, decisions)
    trends = ladder_trend_report.trend_rows(*points, finished, decisions, compute[top])
    csv_cells.write_csv(trends, out / "trends.csv")
    plot_trends(*points, compute[top], out / "trends.png")
    return [
        "## Ladder: trends on the finished rungs",
        "",
        "Each variant's held-out loss against compute (E + A (C/C0)^-alpha, scipy's curve_fit, one point per seed "
        "and rung, each seed at the LR chosen on the other seeds) and each decision's effect against log10 "
        f"compute (a line), with the value and its standard error at {top}'s compute (compare.ladder_trend_report). "
        "A form with more parameters than the finished rungs can pin is not fitted, and says so.",
        "",
        ladder_trend_report.trend_markdown(trends, top),
    ]


def report_blocks(
    suite: Any, runs: pd.DataFrame, out: Path, compute: Mapping[str, float], planned: Mapping[str, Mapping[str, int]]
) -> dict[str, str]:
    """Write ``ladder.md`` and ``decision_accuracy.csv`` (and ``.png``) in ``out`` for ``suite`` (a sweep Suite
    with a ladder), its rungs' 6·N·D (``compute``) and runs planned per rung and variant (``planned``,
    :func:`~andrea_lab.experiments.compare.ladder.planned_cells`); returns the two blocks ``andrea compare
    --doc`` writes: ``summary`` (the sentence that opens docs/results.md) and ``decisions`` (the table and the
    scored prediction)."""
    runs = runs[runs["suite"] == suite.name]
    rungs = [scale.name for scale in suite.scales]
    decisions = [ladder.Decision(a, b) for a, b in suite.ladder.decisions]
    table = ladder.decision_accuracy(runs, rungs, decisions, compute, planned, compare.scored_loss_column(runs))
    costs = ladder_summary.minutes_per_decision(runs, rungs, decisions)
    table["minutes_per_decision"] = table["rung"].map(costs)
    table["arithmetic"] = table["rung"].map(ladder_summary.arithmetic(runs, rungs))
    out.mkdir(parents=True, exist_ok=True)
    csv_cells.write_csv(table, out / "decision_accuracy.csv")
    # matplotlib (~1 s): only when the report is written
    from andrea_lab.experiments.compare.plots_ladder import plot_accuracy

    plot_accuracy(table, out / "decision_accuracy.png")
    lines = [
        f"## Ladder: decision accuracy against the top rung ({rungs[-1]})",
        "",
        f"{len(decisions)} decisions: {', '.join(d.name for d in decisions)}. Each rung's sign per decision "
        "against the top rung's, 95 % bootstrap interval over seeds (compare.ladder); a rung not finished is "
        "missing. A decision's cost: the CPU time (wall time x threads) of both variants' runs at the rung, "
        "averaged over the decisions (compare.ladder_summary). Arithmetic: the precision the rung's runs trained "
        "in, as the sweep's speed rule chose it for the rung (docs/performance.md).",
        "",
        ladder.accuracy_markdown(table),
        "",
        *_trend_lines(runs, table, compute, decisions, out),
        "",
        "## Ladder: the top rung's prediction",
        "",
        *_scored(suite, runs, table, out),
    ]
    blocks = {"summary": ladder_summary.headline(table, costs), "decisions": "\n".join(lines)}
    (out / "ladder.md").write_text(f"{blocks['summary']}\n\n{blocks['decisions']}\n", encoding="utf-8")
    return blocks


def write_ladder_report(
    suite: Any, runs: pd.DataFrame, out: Path, compute: Mapping[str, float], planned: Mapping[str, Mapping[str, int]]
) -> str:
    """:func:`report_blocks`, as the Markdown ``andrea compare`` prints (and ``ladder.md`` holds)."""
    blocks = report_blocks(suite, runs, out, compute, planned)
    return f"{blocks['summary']}\n\n{blocks['decisions']}\n"
