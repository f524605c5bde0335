"""A run's knobs and results as TensorBoard hparams, typed so the HParams dashboard filters and sorts them.

Every knob that can change a run's numbers is one hparam, named by the config key a user types
(``model.warmup_steps``, ``model.config.norm_placement``, ``data.batch_size``, ``trainer.precision``),
plus the sweep's ``suite``, ``scale`` and ``variant``, the global ``seed``, the plugins' distributions and the
package versions. Numbers stay numbers, booleans booleans (so the dashboard offers a range filter and
numeric sort, or checkboxes); ``None`` is written as the string ``"None"``, so that a knob set in some
runs and unset in others still shows as differing.

Why no experiment summary: TensorBoard's HParams plugin uses the *first* experiment summary
(``_hparams_/experiment``) it finds under the log directory as the whole experiment, ``differs``
flags included, so one written per run (as ``torch.utils.tensorboard.summary.hparams`` and Lightning's
``log_hyperparams`` do) hides every other run's knobs and marks nothing as differing. Each run writes
only its session start and end; TensorBoard then derives the experiment from all the runs it is
opened on (``tensorboard --logdir runs`` or a suite directory): each hparam's type, its domain and
``differs``, and the metrics from the runs' scalars (the ``hparams/*`` results among them).

What the dashboard shows before any click is decided by names: it ticks the first five hparams that
differ, sorted by name, and the first five metrics, sorted by tag. So the run's identity and outcome are
capitalised (:data:`STATUS`, :data:`SUITE`, :data:`VARIANT` sort before every lowercase config key), the
held-out loss and its standard error are ``heldout/loss`` and ``heldout/loss_se`` (before ``hparams/*``;
the logger drops Lightning's ``epoch``, :mod:`andrea_lab.fit.loggers`), and the plugin names are not repeated
beside the config keys that hold them. Each session is named by its run (:func:`trial_name`), which the
dashboard shows as the trial's id.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Any, Mapping, Optional

import lightning as L

from andrea_lab.files import read_json
from andrea_lab.runs import tags
from andrea_lab.runs.directory import START_MARKER, RunRecord

Scalar = bool | float | int | str
#: The data module's arguments that cannot change a run's numbers (where and how fast data is read).
DATA_KEYS_IGNORED = ("cache_dir", "num_workers")
#: The data provenance (summary.json ``data``) that identifies what was trained on.
DATA_PROVENANCE_KEYS = ("corpus_sha256", "tokenizer_sha256", "python_version")
#: How a run ended, as the HParams dashboard's session status (its status filter). TensorBoard has no
#: "aborted": an interrupted run (its fit stopped early, not by divergence) is "unknown".
SESSION_STATUS = {"finished": "STATUS_SUCCESS", "diverged": "STATUS_FAILURE", "interrupted": "STATUS_UNKNOWN"}
#: The run's identity and outcome; capitalised so that the dashboard lists (and ticks) them first.
STATUS, SUITE, VARIANT = "Status", "Suite", "Variant"
#: The run's point on a suite's scale axis (runs/<suite>/<scale>/<variant>/), "None" without one.
SCALE = "Scale"
#: The held-out evaluation's loss and standard error: sorted before every other metric tag.
#: ``heldout/loss`` is also the tag of the curve at ``heldout.at_steps``, whose last point this is.
HELDOUT_LOSS, HELDOUT_LOSS_SE = tags.HELDOUT_LOSS, "heldout/loss_se"


def hparam_value(value: Any) -> Scalar:
    """One value as TensorBoard types it: bool, number or string (None and non-finite numbers as strings)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a 0-d tensor or numpy scalar
        return hparam_value(value.item())
    if isinstance(value, (list, tuple)):
        return str([hparam_value(v) for v in value])
    return str(value)


def flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Scalar]:
    """``{"a": {"b": 1}}`` under ``prefix`` as ``{"prefix.a.b": 1}``, every leaf typed by :func:`hparam_value`.
    Private keys (``_instantiator``, which LightningCLI adds to saved hyperparameters) are not knobs."""
    flat: dict[str, Scalar] = {}
    for key, value in values.items():
        if str(key).startswith("_"):
            continue
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(name, value))
        else:
            flat[name] = hparam_value(value)
    return flat


def trainer_knobs(trainer: L.Trainer) -> dict[str, Any]:
    """The resolved trainer settings that change what a fit computes (not logging or progress bars)."""
    return {
        "max_steps": trainer.max_steps,
        "max_epochs": trainer.max_epochs,
        "precision": trainer.precision,
        "gradient_clip_val": trainer.gradient_clip_val,
        "gradient_clip_algorithm": trainer.gradient_clip_algorithm,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "devices": trainer.num_devices,
        "num_nodes": trainer.num_nodes,
        "accelerator": type(trainer.accelerator).__name__,
        "strategy": type(trainer.strategy).__name__,
        "val_check_interval": trainer.val_check_interval,
        "limit_val_batches": trainer.limit_val_batches,
    }


def data_knobs(datamodule: Any) -> dict[str, Any]:
    """The data module's arguments (its saved hyperparameters) less those that cannot change the numbers."""
    hparams = dict(getattr(datamodule, "hparams", None) or {})
    return {key: value for key, value in hparams.items() if key not in DATA_KEYS_IGNORED}


def run_hparams(
    record: RunRecord,
    trainer: Mapping[str, Any],
    data: Mapping[str, Any],
    suite: Optional[str] = None,
    variant: Optional[str] = None,
) -> dict[str, Scalar]:
    """Every knob of a run, flat and typed: the run's identity in the sweep, its config, its provenance."""
    hparams: dict[str, Scalar] = {
        SUITE: hparam_value(suite),
        VARIANT: hparam_value(variant),
        STATUS: record.status,
        "seed": hparam_value(record.seed),
    }
    hparams.update(flatten("model.config", record.config))
    hparams.update(flatten("model", record.training))
    hparams.update(flatten("data", data))
    hparams.update(flatten("data", {key: record.data.get(key) for key in DATA_PROVENANCE_KEYS if key in record.data}))
    hparams.update(flatten("trainer", trainer))
    for kind, plugin in record.plugins.items():
        distribution = plugin.get("distribution")  # its name is model.config.<kind> already
        hparams[f"plugins.{kind}.distribution"] = f"{distribution}=={plugin.get('version')}" if distribution else "None"
    hparams.update(flatten("versions", record.versions))
    return hparams


def run_metrics(record: RunRecord) -> dict[str, float]:
    """The results the HParams dashboard shows beside the knobs (a run lacking one has no value there)."""
    heldout = record.heldout
    metrics = {
        HELDOUT_LOSS: None if heldout is None else heldout.loss,
        HELDOUT_LOSS_SE: None if heldout is None else heldout.se,
        "hparams/final_val_loss": record.final_val_loss,
        "hparams/best_val_loss": record.best_val_loss,
        "hparams/initial_val_loss": record.initial_val_loss,
        "hparams/diverged": float(record.diverged),
        "hparams/divergence_step": record.divergence_step,
        "hparams/spike_count": record.spike_count,
        "hparams/grad_norm_max": record.grad_norm_max,
        "hparams/steps": record.steps,
    }
    return {name: float(value) for name, value in metrics.items() if value is not None}


def trial_name(log_dir: Any, suite: Optional[str]) -> str:
    """What the dashboard calls a run: ``suite/variant/lr2e-3-seed1`` in a sweep (``suite/scale/variant/...``
    in a suite with a scale axis), else ``experiment/version_N``: its directory from the suite's (or the
    experiment's) folder on, as ``tensorboard --logdir runs`` names it."""
    from pathlib import Path

    parts = Path(str(log_dir)).parts
    if not suite:
        return "/".join(parts[-2:])
    # The suite's folder is the last component named so with a variant and a run below it (a variant may
    # share the suite's name; a scale adds one level between them).
    starts = [index for index, part in enumerate(parts[:-2]) if part == suite]
    return "/".join(parts[starts[-1] :] if starts else parts[-3:])


def session_summaries(hparams: Mapping[str, Scalar], status: str, trial: Optional[str] = None) -> list:
    """The session start (the knobs) and end (how the run ended) summaries of one run: no experiment
    summary (see the module docstring). ``trial`` names the session (default: a hash of the knobs)."""
    import time

    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2, summary_v2

    end = plugin_data_pb2.SessionEndInfo(
        status=api_pb2.Status.Value(SESSION_STATUS.get(status, "STATUS_UNKNOWN")), end_time_secs=time.time()
    )
    end_summary = summary_pb2.Summary()
    end_summary.value.add(
        tag=metadata.SESSION_END_INFO_TAG,
        tensor=metadata.NULL_TENSOR,
        metadata=metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_end_info=end)),
    )
    return [summary_v2.hparams_pb(dict(hparams), trial_id=trial), end_summary]


def log_run_hparams(
    trainer: L.Trainer,
    hparams: Mapping[str, Scalar],
    metrics: Mapping[str, float],
    status: str,
    step: int,
    trial: Optional[str] = None,
) -> None:
    """Write the knobs and results to every logger of the trainer that keeps hparams.

    A TensorBoard logger gets the metrics as scalars and the session summaries in its event file; any
    other logger with hparams metrics (MLflow, W&B...) its own ``log_hyperparams``; a CSV logger nothing
    (summary.json is the record)."""
    from lightning.fabric.loggers import TensorBoardLogger  # the base of Lightning's (and andrea's) TensorBoard loggers

    hparams = {**hparams, SCALE: hparam_value(sweep_scale(trainer))}
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            write_summary_events(Path(logger.log_dir), hparams, metrics, status, step, trial)
            continue
        elif _takes_metrics(logger):
            logger.log_hyperparams(dict(hparams), metrics=dict(metrics), step=step)
        else:
            continue
        logger.save()


#: The event file that holds a run's one-point results and HParams session (``events.out.tfevents.*.summary``).
SUMMARY_EVENTS_SUFFIX = ".summary"


def write_summary_events(
    run_dir: Path,
    hparams: Mapping[str, Scalar],
    metrics: Mapping[str, float],
    status: str,
    step: int,
    trial: Optional[str] = None,
) -> Path:
    """The run's results and HParams session in an event file of their own, replacing the one an earlier
    segment of the run wrote: a run interrupted and resumed shows its results once, and the status it ended
    with (TensorBoard keeps the first session it reads, and every point of every file)."""
    from torch.utils.tensorboard import SummaryWriter

    for earlier in run_dir.glob(f"events.out.tfevents.*{SUMMARY_EVENTS_SUFFIX}"):
        earlier.unlink()
    writer = SummaryWriter(str(run_dir), filename_suffix=SUMMARY_EVENTS_SUFFIX)
    try:
        for name, value in metrics.items():
            writer.add_scalar(name, value, step)
        # SummaryWriter has no public call for a raw Summary; Lightning's log_hyperparams uses the same.
        for summary in session_summaries(hparams, status, trial):
            writer._get_file_writer().add_summary(summary, step)
    finally:
        writer.close()
    return Path(writer.get_logdir())


def sweep_scale(trainer: L.Trainer) -> Optional[str]:
    """The scale ``andrea sweep`` started this run at: from the start marker in the run's directory, the record
    ``andrea compare`` reads it from too (one source, so the dashboard and the report agree); None outside a
    sweep or in a suite without a scale axis."""
    from pathlib import Path

    run_dir = getattr(trainer.logger, "log_dir", None) or trainer.default_root_dir
    return (read_json(Path(run_dir) / START_MARKER) or {}).get("scale") if run_dir else None


def _takes_metrics(logger: Any) -> bool:
    import inspect

    return "metrics" in inspect.signature(logger.log_hyperparams).parameters
