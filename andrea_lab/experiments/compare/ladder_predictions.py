"""Predictions of a ladder's top rung, written before it runs and scored after (issue 54, item 3).

Why written first and hashed: a trend fitted after the top rung is known can be bent towards it without anyone
noticing (which rungs to fit, which form, which seeds). So the prediction is a file, made from the lower rungs
alone (each variant's held-out loss and each decision's effect and sign at the top rung's compute, with their
standard errors: :mod:`andrea_lab.experiments.compare.ladder_trends`), committed before the top rung's first
run, and its sha256 recorded in the suite. Scoring refuses, in one line, a file whose hash is not the one
recorded (edited since) or whose last commit is later than the top rung's first run started (written after).
The score is the error in nats of each prediction and whether each decision's sign came out right, next to
the prediction and its standard error.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare import ladder_trends
from andrea_lab.experiments.compare.ladder import Decision
from andrea_lab.files import HandedFileError, load_json, write_json_atomic

FORMAT = "andrea-lab ladder prediction 1"


class PredictionError(UsageError):
    """A prediction file that cannot be trusted as written before the top rung (exit status 2)."""


def _fitted(fit, *args) -> dict[str, float]:
    """``{value, se}`` of a fit at the target, or NaNs with the reason when the points cannot carry the fit."""
    try:
        prediction = fit(*args[:-1]).predict(args[-1])
    except (ValueError, RuntimeError) as error:  # too few computes; curve_fit's "optimal parameters not found"
        return {"value": None, "se": None, "unfitted": str(error)}
    return {"value": prediction.value, "se": None if math.isnan(prediction.se) else prediction.se}


def make_prediction(
    runs: pd.DataFrame,
    lower_rungs: Sequence[str],
    compute: Mapping[str, float],
    decisions: Sequence[Decision],
    top: str,
    suite: str,
) -> dict[str, Any]:
    """The prediction of every variant's loss and every decision's effect at ``top``'s compute, from the
    runs of ``lower_rungs`` only."""
    losses, effects = ladder_trends.ladder_points(runs, lower_rungs, compute, decisions)
    target = compute[top]
    variants = {v: _fitted(ladder_trends.fit_power_law, *points, target) for v, points in losses.items()}
    lr_points = ladder_trends.best_lr_points(runs, lower_rungs, compute, list(losses))
    best_lrs = {v: _fitted(ladder_trends.fit_log_linear, *points, target) for v, points in lr_points.items()}
    predicted = {}
    for decision in decisions:
        effect = _fitted(ladder_trends.fit_log_linear, *effects[decision.name], target)
        sign = None if effect["value"] is None else int(np.sign(effect["value"]))
        predicted[decision.name] = {"a": decision.a, "b": decision.b, **effect, "sign": sign}
    return {
        "format": FORMAT,
        "suite": suite,
        "top_rung": top,
        "top_compute": target,
        "from_rungs": list(lower_rungs),
        "variants": variants,
        "decisions": predicted,
        "log10_best_lrs": best_lrs,
    }


def sha256_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_prediction(path: str | Path, prediction: Mapping[str, Any]) -> str:
    """Write the prediction (JSON) and return its sha256, to record in the suite. An existing file is never
    replaced: a prediction is written once."""
    path = Path(path)
    if path.exists():
        raise PredictionError(f"{path} exists; a prediction is written once (give a new file name)")
    write_json_atomic(path, dict(prediction))
    return sha256_of(path)


def committed_at(path: str | Path) -> Optional[datetime]:
    """When the file was last committed (git log), or None when it is not in a git repository's history."""
    path = Path(path).resolve()
    try:
        done = subprocess.run(
            ["git", "log", "-1", "--format=%cI", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:  # no git here
        return None
    text = done.stdout.strip()
    return datetime.fromisoformat(text) if done.returncode == 0 and text else None


def read_checked(path: str | Path, recorded_sha256: str, top_started: Optional[datetime]) -> dict[str, Any]:
    """The prediction, once its hash is the one recorded and (when it is in git and the top rung has begun)
    its last commit precedes the top rung's first run; a one-line :class:`PredictionError` otherwise."""
    path = Path(path)
    if not path.is_file():
        raise PredictionError(
            f"prediction file {path} does not exist or is not a regular file; write it from the lower rungs first"
        )
    actual = sha256_of(path)
    if actual != recorded_sha256:
        raise PredictionError(
            f"prediction file {path} has sha256 {actual}, not the {recorded_sha256} recorded: it changed after "
            "it was recorded; score the recorded version (git show) or record a new prediction before the top rung"
        )
    committed = committed_at(path)
    if committed is not None and top_started is not None and committed > top_started:
        raise PredictionError(
            f"prediction file {path} was last committed {committed.isoformat()}, after the top rung's first run "
            f"started ({top_started.isoformat()}): a prediction must be committed before the top rung runs"
        )
    try:  # within the bounds of any handed JSON: a regular file, size and nesting capped
        prediction = load_json(path, "prediction file")
    except HandedFileError as problem:
        raise PredictionError(str(problem)) from None
    if not isinstance(prediction, dict) or prediction.get("format") != FORMAT:
        raise PredictionError(f"{path} is not a ladder prediction (its format is not {FORMAT!r})")
    return prediction


def _error(predicted: Optional[float], actual: float) -> float:
    return math.nan if predicted is None or not math.isfinite(actual) else actual - predicted


def score(
    prediction: Mapping[str, Any],
    actual_losses: Mapping[str, float],
    actual_effects: Mapping[str, float],
    actual_best_lrs: Optional[Mapping[str, float]] = None,
) -> pd.DataFrame:
    """One row per predicted quantity (each variant's loss, each decision's effect, each variant's log10 best
    LR where the prediction has it): predicted ± se, the top rung's measured value (mean over its seeds; the
    best LR over all its seeds), the error (measured − predicted: nats, or decades of LR) and, for a decision,
    whether the predicted sign was right."""
    rows = []
    for variant, guess in prediction["variants"].items():
        actual = float(actual_losses.get(variant, math.nan))
        rows.append(dict(kind="loss", name=variant, predicted=guess["value"], se=guess["se"], actual=actual,
                         error=_error(guess["value"], actual), sign_right=None))  # fmt: skip
    for variant, guess in prediction.get("log10_best_lrs", {}).items():
        actual = float(actual_best_lrs.get(variant, math.nan)) if actual_best_lrs else math.nan
        rows.append(dict(kind="log10_best_lr", name=variant, predicted=guess["value"], se=guess["se"],
                         actual=actual, error=_error(guess["value"], actual), sign_right=None))  # fmt: skip
    for name, guess in prediction["decisions"].items():
        actual = float(actual_effects.get(name, math.nan))
        right = None if guess["sign"] is None or not math.isfinite(actual) else guess["sign"] == int(np.sign(actual))
        rows.append(dict(kind="effect", name=name, predicted=guess["value"], se=guess["se"], actual=actual,
                         error=_error(guess["value"], actual), sign_right=right))  # fmt: skip
    return pd.DataFrame(rows)


def measured(
    runs: pd.DataFrame, top: str, decisions: Sequence[Decision]
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The top rung's measured values, as predicted: each variant's mean held-out loss over seeds and each
    decision's mean effect, every seed at the LR chosen on the other seeds; and each variant's log10 best LR."""
    losses, effects = ladder_trends.ladder_points(runs, [top], {top: 1.0}, decisions)
    mean = lambda values: float(np.mean(values)) if values else math.nan  # noqa: E731
    lrs = ladder_trends.best_lr_points(runs, [top], {top: 1.0}, list(losses))
    return (
        {v: mean(p[1]) for v, p in losses.items()},
        {d: mean(p[1]) for d, p in effects.items()},
        {v: mean(p[1]) for v, p in lrs.items()},
    )
