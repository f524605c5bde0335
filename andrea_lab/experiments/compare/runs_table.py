"""Reading runs for a comparison: every run directory under a root becomes one row of a DataFrame.

The numbers come from the run's record (``summary.json``, :class:`andrea_lab.runs.directory.RunRecord`) and
nothing else: divergence, spikes and gradient norms were decided once, during the fit, by the
StabilityMonitor, and a comparison never re-decides them from curves. A run without a record (killed
before its end, or trained with the summary disabled) is listed with its state and left out of the
statistics. A run's suite, variant, learning rate and seed come from the sweep's ``sweep-run.json``,
else the record, else the directory layout ``<suite>/<variant>/lr<lr>-seed<seed>/`` of ``andrea sweep``.

Curves (for the plots) and the step-0 stability scalars (for the initialisation table) are read from
the TensorBoard event files with TensorBoard's own ``EventAccumulator``.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd

from andrea_lab.experiments.compare import csv_cells, outcomes
from andrea_lab.experiments.compare.config_variants import (
    declared_variant,
    name_adhoc_variants,
    natural_key,
    run_config,
    supersede_repeats,
)
from andrea_lab.experiments.compare.heldout_columns import curve_columns, heldout_columns, heldout_curve_columns
from andrea_lab.experiments.compare.run_columns import (  # noqa: F401  (the columns, imported from here too)
    ATTN_ENTROPY_MIN_FINAL,
    ATTN_LOGIT_MAX_FINAL,
    COMPILED,
    DIVERGENCE_CAUSE,
    GAVE_WAY,
    GAVE_WAY_LEAD,
    INTEGER_COLUMNS,
    MACHINE,
    OPTIONAL_COLUMNS,
    PRECISION,
    RUN_COLUMNS,
    SCALE,
    SCALE_INDEX,
    SPLIT,
    STARTED,
    THREADS,
    WALL_TIME,
)
from andrea_lab.experiments.compare.run_identity import check_identity, whole_numbers
from andrea_lab.experiments.compare.stats import set_aside_unscored
from andrea_lab.files import read_json, read_regular_bytes
from andrea_lab.fit.stability import (
    precursors,  # noqa: F401  (registers the precursor metrics in probe.METRICS)
    probe,
)
from andrea_lab.inside.lens_loss import lens_columns
from andrea_lab.runs import tags
from andrea_lab.runs.directory import (
    DONE_MARKER,
    FAILED_MARKER,
    START_MARKER,
    SUMMARY_FILE,
    RunRecord,
    is_aside,
    is_comparison_run,
    parse_run_version,
    read_record,
)

VAL_TAG = tags.VAL_LOSS
TRAIN_TAG = tags.TRAIN_LOSS
#: Every probe metric's step-0 values are kept as columns ``init/<metric name>/<key>`` (:func:`init_column`)
#: for the initialisation table and plots.
INIT = "init/"


def init_column(metric: probe.ProbeMetric, key: str = "") -> str:
    """The runs-frame column of a probe metric's step-0 value: ``init/grad_norm/block_00``."""
    return INIT + metric.key(key)


def _init_values(curves: dict[str, Curve]) -> dict[str, float]:
    """The finite step-0 values of the probe metrics' curves, by :func:`init_column`."""
    return {
        INIT + tag.split("/", 1)[1]: curve[0][1]
        for tag, curve in curves.items()
        if any(m.owns(tag) for m in probe.METRICS.values())
        and curve
        and curve[0][0] == 0
        and math.isfinite(curve[0][1])
    }


#: Where a run without those summary fields has the curves instead: the probe's max attention logit per block
#: (``stability/attn_logit_max/block_NN``) and the attention entropy per block (the tag the entropy probe
#: logs under; change it here if that metric is named otherwise).
ATTN_LOGIT_MAX_TAG = probe.attn_logit_max.tag
ATTN_ENTROPY_TAG = probe.attn_entropy.tag

Curve = list[tuple[int, float]]
#: Row keys :func:`load_run` adds for :func:`load_runs` only: the run's flat config, whether a sweep or its
#: config named its variant (else :mod:`andrea_lab.experiments.compare.config_variants` names it by its differences).
_CONFIG, _NAMED = "_config", "_named"


#: The per-run curves a comparison plots (never written to runs.csv): the losses, and the largest attention
#: logit of any block and log Z per probe step (the two Wortsman et al. instabilities' signals).
CURVE_COLUMNS = ("val_curve", "train_curve", "attn_logit_curve", "log_z_curve")


def precursor_curves(curves: dict[str, Curve]) -> dict[str, Curve]:
    """The largest attention logit over blocks at each probe step, and log Z, from a run's scalars."""
    per_step: dict[int, float] = {}
    for tag, curve in curves.items():
        if probe.attn_logit_max.owns(tag) and tag != probe.attn_logit_max.tag:
            for step, value in curve:
                per_step[step] = max(per_step.get(step, value), value)
    return {"attn_logit_curve": sorted(per_step.items()), "log_z_curve": list(curves.get(probe.log_z.tag, []))}


def gave_way_columns(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The signal that gave way first before the divergence (else the first spike with one) and its lead."""
    records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
    chosen = next((r for r in records if r.get("event") == "divergence"), None)
    chosen = chosen or next((r for r in records if r.get("signal")), None) or next(iter(records), None)
    if chosen is None or chosen.get("event") not in ("divergence", "spike"):
        return {GAVE_WAY: None, GAVE_WAY_LEAD: None}
    signal = chosen.get("signal") if isinstance(chosen.get("signal"), str) else "none"
    return {GAVE_WAY: f"{chosen['event']}: {signal}", GAVE_WAY_LEAD: chosen.get("lead_steps")}


def _is_run_dir(names: Iterable[str]) -> bool:
    return any(name.startswith("events.out.tfevents.") or name in (SUMMARY_FILE, START_MARKER) for name in names)


def find_runs(root: str | Path) -> list[Path]:
    """Every run directory under ``root`` (``root`` itself included), skipping directories the sweep
    moved aside (``*.interrupted-*``, ``*.failed-*``) and ``andrea compare``'s own ``_comparison`` run."""
    found = []
    for directory, subdirs, files in os.walk(Path(root)):
        path = Path(directory)
        if is_aside(path) or is_comparison_run(path):
            subdirs[:] = []
            continue
        if _is_run_dir(files):
            found.append(path)
            subdirs[:] = []  # checkpoints/ and the like
        else:
            subdirs[:] = sorted(d for d in subdirs if not (is_aside(Path(d)) or is_comparison_run(Path(d))))
    return sorted(found, key=lambda path: natural_key(str(path)))


def read_scalars(run_dir: Path) -> dict[str, Curve]:
    """Every scalar tag of a run's event files, as ``(step, value)`` sorted by step (the last value logged
    at a step wins)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for path in run_dir.glob("*tfevents*"):
        if not path.is_file():  # a FIFO would block the reader forever, a device feed it without end
            raise ValueError(f"{path} is not a regular file (a FIFO, device or dangling link?); move it out of the run")
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: sorted({e.step: float(e.value) for e in accumulator.Scalars(tag)}.items())
        for tag in accumulator.Tags().get("scalars", [])
    }


def _layout_identity(run_dir: Path, root: Path) -> tuple[str, str]:
    """(suite, variant) from ``<suite>/<variant>/<version>`` relative to the directory compared."""
    try:
        parts = run_dir.resolve().relative_to(root.resolve()).parts
    except ValueError:
        parts = ()
    if len(parts) >= 3:
        return parts[-3], parts[-2]
    if len(parts) == 2:
        return root.resolve().name, parts[0]
    if len(parts) == 1:  # runs/<experiment> of plain fits is its own suite; <suite>/<variant> of a sweep is not
        name = root.resolve().name
        return (root.resolve().parent.name, name) if parse_run_version(parts[0]) else (name, name)
    return run_dir.resolve().parent.parent.name, run_dir.resolve().parent.name


def _field(data: Any, name: str) -> Optional[float]:
    """The number stored under key ``name`` anywhere in a summary.json tree (its section may move), else None."""
    if isinstance(data, dict):
        if name in data:
            return _first_number(data[name])
        for value in data.values():
            if (found := _field(value, name)) is not None:
                return found
    return None


def _final_over_blocks(curves: dict[str, Curve], tag: str, reduce) -> Optional[float]:
    """``reduce`` over blocks of each block curve's last value under ``tag``: the last probe, at most
    ``stability.interval`` steps before the end. None when no probe ran after step 0 (a value at init is not
    a final value: a run that stopped before its second probe has none); NaN when a last value is
    non-finite (the run blew up)."""
    last = [curve[-1] for name, curve in curves.items() if name.startswith(tag + "/") and curve]
    if not last or any(step == 0 for step, _ in last):
        return None
    values = [value for _, value in last]
    return reduce(values) if all(math.isfinite(v) for v in values) else math.nan


def final_attention(run_dir: Path, curves: Optional[dict[str, Curve]]) -> dict[str, float]:
    """The run's final max attention logit and minimum attention entropy: summary.json's
    ``attn_logit_max_final`` / ``attn_entropy_min_final`` where the fit recorded them, else the last probe
    values of the curves (max over blocks of :data:`ATTN_LOGIT_MAX_TAG`, min of :data:`ATTN_ENTROPY_TAG`)."""
    summary = read_json(run_dir / SUMMARY_FILE) or {}
    found = {}
    for column, tag, reduce in (
        (ATTN_LOGIT_MAX_FINAL, ATTN_LOGIT_MAX_TAG, max),
        (ATTN_ENTROPY_MIN_FINAL, ATTN_ENTROPY_TAG, min),
    ):
        value = _field(summary, column)
        if value is None and curves is not None:
            value = _final_over_blocks(curves, tag, reduce)
        if value is not None:
            found[column] = value
    return found


def _first_number(*values: Any) -> Optional[float]:
    for value in values:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def split_version(record: Optional[RunRecord]) -> Optional[str]:
    """The run's split version as text (a claim's runs must share it), None without data provenance."""
    data = record.data if record is not None and isinstance(record.data, dict) else {}
    if not data:
        return None
    return str(data.get("split_version") or 1)


def _state_without_record(run_dir: Path, started: dict) -> str:
    if (run_dir / FAILED_MARKER).exists():
        return "failed"
    if started and not (run_dir / DONE_MARKER).exists():
        return "incomplete"
    return "no summary"


def record_columns(record: RunRecord) -> dict[str, Any]:
    """The numbers of a run's summary.json that runs.csv carries."""
    heldout = record.heldout
    return dict(
        initial_val_loss=record.initial_val_loss,
        final_val_loss=record.final_val_loss,
        best_val_loss=record.best_val_loss,
        **heldout_columns(heldout),
        divergence_kind=record.divergence_kind if record.diverged else None,
        divergence_step=record.divergence_step if record.diverged else None,
        divergence_cause=record.divergence_cause if record.diverged else None,
        **outcomes.record_outcome_columns(record.outcome),
        **gave_way_columns(record.gave_way_first),
        grad_norm_median=record.grad_norm_median,
        grad_norm_max=record.grad_norm_max,
        grad_norm_max_after_warmup=record.grad_norm_max_after_warmup,
        spike_count=record.spike_count,
        steps=record.steps,
        warmup_steps=record.training.get("warmup_steps"),
        vocab_size=record.config.get("vocab_size"),
        wall_time_s=record.wall_time_s or None,
    )


def load_run(run_dir: str | Path, root: str | Path | None = None, events: bool = True) -> dict[str, Any]:
    """One run directory as a row: identity, its record's numbers, and (with ``events``) its curves."""
    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir.parent.parent
    started = read_json(run_dir / START_MARKER) or {}
    record = read_record(run_dir)
    suite, variant = _layout_identity(run_dir, root)
    from_name = parse_run_version(run_dir.name) or (None, None)
    seed = started.get("seed", record.seed if record is not None else None)
    config = run_config(run_dir, record)
    named = started.get("variant") or declared_variant(config)
    row: dict[str, Any] = {
        "suite": started.get("suite") or suite,
        "variant": named or variant,
        "variant_index": started.get("variant_index"),
        "lr": _first_number(started.get("lr"), record.lr if record else None, from_name[0]),
        "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else from_name[1],
        "status": record.status if record is not None else _state_without_record(run_dir, started),
        "source": SUMMARY_FILE if record is not None else "markers",
        "path": str(run_dir),
    }
    if isinstance(started.get(STARTED), str):
        row[STARTED] = started[STARTED]
    if started.get(SCALE) is not None:  # a suite's scale axis (andrea_lab.experiments.sweep.scales)
        row.update(scale=str(started[SCALE]), scale_index=started.get(SCALE_INDEX))
    if record is not None:
        row.update(record_columns(record))
        row.update(heldout_curve_columns(record.heldout_curve))
    # The stuck-at-unigram window's first step, where the run's config set it (null: its warmup_steps).
    row["stuck_after"] = _first_number(config.get("stability.stuck_after"))
    # What it ran at and on (andrea_lab.runs.machine): a claim between runs that differ in either is refused.
    machine = record.machine if record is not None else {}
    precision = config.get("trainer.precision") or machine.get("precision")
    row[PRECISION], row[MACHINE] = (None if precision is None else str(precision)), machine.get("kind")
    compiled = config.get("model.compile")
    row[COMPILED] = None if compiled is None else int(compiled is True or str(compiled).lower() == "true")
    row[THREADS] = machine.get("threads")
    row[SPLIT] = split_version(record)
    row.update(lens_columns(run_dir))  # `andrea lens`'s lens.json, when the run has one
    curves = read_scalars(run_dir) if events else None
    if curves is not None:
        row["val_curve"], row["train_curve"] = curves.get(VAL_TAG, []), curves.get(TRAIN_TAG, [])
        row.update(precursor_curves(curves))
        row.update(_init_values(curves))
    if record is not None:
        row.update(final_attention(run_dir, curves))
    row[_CONFIG], row[_NAMED] = config, bool(named)
    return row


def load_runs(root: str | Path, events: bool = True) -> pd.DataFrame:
    """Every run under ``root``, one row each (empty frame with :data:`RUN_COLUMNS` when there is none)."""
    root = Path(root)
    rows = [load_run(run_dir, root, events) for run_dir in find_runs(root)]
    configs, named = [row.pop(_CONFIG) for row in rows], [row.pop(_NAMED) for row in rows]
    frame = _typed(pd.DataFrame(rows, columns=None if rows else RUN_COLUMNS))
    return supersede_repeats(set_aside_unscored(name_adhoc_variants(frame, configs, named))) if rows else frame


#: Bytes a handed ``runs.csv`` may have: about 140,000 runs (a row is ~480 bytes; the largest committed table,
#: placements', holds 300 runs in 143 KB).
MAX_RUNS_CSV_BYTES = 64 << 20


def read_runs_csv(path: str | Path) -> pd.DataFrame:
    """A ``runs.csv`` that ``andrea compare`` wrote (also older ones, without the held-out columns). A handed
    one is read only as a regular file of at most :data:`MAX_RUNS_CSV_BYTES` (andrea_lab.files.read_regular_bytes:
    a FIFO would make the read wait forever, a link to /dev/zero grow without end); else one
    :class:`~andrea_lab.files.HandedFileError`."""
    data = read_regular_bytes(path, "runs table", MAX_RUNS_CSV_BYTES)
    strings = {
        "divergence_kind": "string",
        DIVERGENCE_CAUSE: "string",
        GAVE_WAY: "string",
        SCALE: "string",
        PRECISION: "string",
        MACHINE: "string",
        SPLIT: "string",
        STARTED: "string",
    }
    table = pd.read_csv(io.BytesIO(data), dtype=strings)
    typed = _typed(csv_cells.restored(table, (*_STRING_COLUMNS, *csv_cells.HANDED_TEXT_COLUMNS)))
    return set_aside_unscored(check_identity(typed, path))


def write_runs_csv(runs: pd.DataFrame, path: str | Path) -> None:
    """The per-run table, sorted, with the :data:`RUN_COLUMNS` that a later ``read_runs_csv`` needs (and those
    :data:`OPTIONAL_COLUMNS` some run has); its text cells safe in a spreadsheet (compare.csv_cells)."""
    present = [c for c in OPTIONAL_COLUMNS if c in runs and runs[c].notna().any()]
    if COMPILED in present and not (runs[COMPILED] == 1).any():  # carried where some run compiled (run_columns)
        present.remove(COMPILED)
    present += curve_columns(runs)
    order = ([SCALE_INDEX] if SCALE_INDEX in present else []) + ["variant", "lr", "seed"]
    table = runs.reindex(columns=RUN_COLUMNS + present).sort_values(order, na_position="last")
    for column in set(INTEGER_COLUMNS) & set(table.columns):  # "40", never "40.0", whichever path built the frame
        table[column] = whole_numbers(table[column])
    csv_cells.write_csv(table, path, (*_STRING_COLUMNS, *csv_cells.HANDED_TEXT_COLUMNS))


_STRING_COLUMNS = (
    "suite",
    "variant",
    "status",
    "divergence_kind",
    DIVERGENCE_CAUSE,
    GAVE_WAY,
    outcomes.OUTCOME,
    "source",
    "path",
    SCALE,
    PRECISION,
    MACHINE,
    SPLIT,
    STARTED,
)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Every :data:`RUN_COLUMNS` present, numbers as floats (missing = NaN), names as strings."""
    frame = frame.reindex(columns=list(dict.fromkeys([*RUN_COLUMNS, *frame.columns])))
    for column in frame.columns:
        if column in _STRING_COLUMNS:
            frame[column] = frame[column].astype("object").where(frame[column].notna(), None)
        elif column in INTEGER_COLUMNS:
            frame[column] = whole_numbers(frame[column])
        elif column not in CURVE_COLUMNS:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return frame
