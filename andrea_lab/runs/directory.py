"""The run directory format, in one place: ``summary.json`` as a typed record, the sweep's marker files,
and the two file helpers everything that writes or checks a run uses (atomic JSON, sha256).

A run directory (``runs/<experiment>/<version>/``, or ``<runs-dir>/<suite>/<variant>/lr<lr>-seed<seed>/``
under ``andrea sweep``) holds, besides Lightning's own files:

``summary.json``       the :class:`RunRecord` of the fit, written by
                       :class:`andrea_lab.fit.RunSummary` at the end of every fit (atomically,
                       also after Ctrl-C or a crash: status ``interrupted``);
``validate.json``      the held-out record an ``andrea validate`` of a checkpoint writes;
``sweep-run.json``     what the sweep started here and how (before the fit starts);
``sweep-done.json``    the fit exited 0 (or diverged): the sweep skips this run next time;
``sweep-failed.json``  the fit exited non-zero: the next sweep moves the directory aside and reruns it;
``sweep.log``          the fit's stdout and stderr;
``checkpoints/preempted.ckpt``  written by a fit stopped by SIGTERM/SIGUSR1 (andrea_lab.fit.preemption):
                       ``andrea fit --resume`` and the next sweep continue from it.

Beside the runs, ``_comparison/`` (in a suite's directory) is ``andrea compare``'s report as a TensorBoard
run of its own (text and images); it is not a run, and readers of runs skip it (:func:`is_comparison_run`).

:func:`run_state` is the one resume rule, used by every executor of a sweep and by ``andrea compare``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
import os
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from andrea_lab.errors import UsageError
from andrea_lab.files import manifest_path, read_json, write_json_atomic
from andrea_lab.safe_yaml import check_bounds, read_yaml

#: Version 2 added ``heldout``, ``data``, ``versions`` and ``training``; version-1 files read with those empty.
SCHEMA_VERSION = 2
SUMMARY_FILE = "summary.json"
VALIDATE_FILE = "validate.json"
START_MARKER, START_TIME_FORMAT = "sweep-run.json", "%Y-%m-%dT%H:%M:%S%z"  # the marker; its "started" time
DONE_MARKER = "sweep-done.json"
FAILED_MARKER = "sweep-failed.json"
LOG_FILE = "sweep.log"
LOCK_FILE = ".sweep.lock"
PREEMPTED_CHECKPOINT = "checkpoints/preempted.ckpt"
LAST_CHECKPOINT = "checkpoints/last.ckpt"
#: How a fit ended. ``diverged`` wins over ``interrupted`` where the divergence ended the run (it is done); a run
#: that diverged and was going on to its end when it was interrupted is ``interrupted`` (andrea_lab.fit.summary).
STATUSES = ("finished", "diverged", "interrupted")
DONE_STATES = ("finished", "diverged")
#: Why a run diverged (``divergence.kind``; the StabilityMonitor's detectors, docs/stability.md).
NONFINITE = "nonfinite"
STUCK_AT_UNIGRAM = "stuck_at_unigram"
#: A run that never trained and whose loss stayed well above where it started (``blowup_margin``, events.py).
BLEW_UP = "blew_up"
FINAL_ABOVE_BEST = "final_above_best"
#: A run that trained (well below the unigram loss) and then failed: its loss went back up and stayed up, or
#: turned non-finite (``divergence.cause``: LOSS_ROSE or NONFINITE). The instability the stability
#: interventions are meant to prevent; ``stuck_at_unigram`` is a run that never trained.
TRAINED_THEN_DIVERGED = "trained_then_diverged"
LOSS_ROSE = "loss_rose"
DIVERGENCE_KINDS = (NONFINITE, STUCK_AT_UNIGRAM, BLEW_UP, FINAL_ABOVE_BEST, TRAINED_THEN_DIVERGED)
ASIDE_TAGS = (".interrupted-", ".failed-")
#: The directory name of ``andrea compare``'s TensorBoard run (and the prefix of its temporary twin).
COMPARISON_RUN = "_comparison"


# ---------------------------------------------------------------------------------------- record

#: The distributions whose versions a record carries (a result depends on them; say which were used).
RECORDED_PACKAGES = ("andrea-lab", "torch", "lightning", "tokenizers", "numpy")


def package_versions() -> dict[str, Optional[str]]:
    """The Python version and the versions of :data:`RECORDED_PACKAGES` (None where not installed)."""
    versions: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def finite_or_none(value: Any) -> Optional[float]:
    """A finite float, or None: a record stores no NaN/inf (a non-finite loss is a divergence)."""
    if value is None:
        return None
    value = float(value.item() if hasattr(value, "item") else value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class HeldOut:
    """The end-of-fit evaluation on windows drawn across all held-out documents.

    ``se`` is the standard error of ``loss`` with documents as the unit (windows of one document are
    correlated), or with contiguous blocks of the stream where the corpus has no document boundaries
    (``se_unit``). ``sampled`` says whether the windows are a seeded sample of the held-out split
    (``tokens`` of ``split_tokens``) or the whole of it. ``bytes`` is the text those tokens stand for and
    ``bits_per_byte`` the same loss per byte of text (comparable across tokenizers and vocabularies); both
    None where the tokenizer is not byte-level, and in records from before they were kept."""

    loss: Optional[float]
    se: Optional[float]
    tokens: int
    documents: int
    windows: int
    split_tokens: int
    sampled: bool
    se_unit: str
    seed: int
    bytes: Optional[int] = None
    bits_per_byte: Optional[float] = None
    max_tokens: Optional[int] = None  # the budget the windows were planned with (sized to the run if not set)
    # The document-weighted score (andrea_lab.data.heldout.capped_mean): each document's tokens capped at
    # ``document_cap`` so that none carries more than ``largest_document_share`` of it; None in older records.
    document_loss: Optional[float] = None
    document_se: Optional[float] = None
    document_cap: Optional[float] = None
    largest_document_share: Optional[float] = None
    # ``{"names": [...] or None, "tokens": [...], "loss_sums": [...]}``: per scored document (or block), in
    # stream order, from which both scores recompute; None in older records.
    per_document: Optional[dict] = None
    # ``{stratum: {"loss", "se", "documents", "tokens"}}`` within prose and code (andrea_lab.data.strata); ``parts``
    # the same per part of the selection/test split (data.judging_split); None where labels are unknown.
    strata: Optional[dict] = None
    parts: Optional[dict] = None
    # What scored (andrea_lab.fit.eval_batch): the forward's precision ("bfloat16 autocast" under bf16-mixed,
    # "float32") and the windows per forward pass; None in older records.
    precision: Optional[str] = None
    batch_size: Optional[int] = None


@dataclass(frozen=True)
class RunRecord:
    """``summary.json``: what one fit did and ended with. The single schema every writer and reader uses.

    ``final_val_loss``/``best_val_loss``/``initial_val_loss`` come from the cheap in-training validation
    (a fixed, small set of windows); ``heldout`` is the representative end-of-fit evaluation that
    comparisons use. ``divergence`` is ``{"step", "kind"}`` (kinds in docs/stability.md) or both null.
    """

    status: str
    schema: int = SCHEMA_VERSION
    experiment: Optional[str] = None
    version: Optional[int | str] = None
    initial_val_loss: Optional[float] = None
    final_val_loss: Optional[float] = None
    best_val_loss: Optional[float] = None
    best_step: Optional[int] = None
    divergence: dict[str, Any] = field(default_factory=lambda: {"step": None, "kind": None})
    #: How the run ended: ``{"kind": trained | stuck | regressed | blew_up, "step", "size", "rise"}``
    #: (andrea_lab.runs.outcome); {} in records from before it, whose outcome is read from the fields above.
    outcome: dict[str, Any] = field(default_factory=dict)
    spike_count: int = 0
    grad_norm_max: Optional[float] = None
    grad_norm_median: Optional[float] = None
    #: Over the steps after warmup only: the step-0 gradient (an initialisation figure) is excluded.
    grad_norm_max_after_warmup: Optional[float] = None
    tokens_seen: int = 0
    steps: int = 0
    wall_time_s: float = 0.0
    lr: Optional[float] = None
    seed: Optional[int] = None
    data_seed: Optional[int] = None
    unigram_loss: Optional[float] = None
    #: The stability probe's last measurement: ``step``, ``attn_logit_max_final`` (largest attention logit of
    #: any block) and ``attn_entropy_min_final`` (lowest attention entropy of any head); {} without a probe.
    probe: dict[str, Any] = field(default_factory=dict)
    heldout: Optional[HeldOut] = None
    #: The held-out loss at the steps fixed in advance (``heldout.at_steps``): ``[{"step", "loss", "se"}]``,
    #: on the same windows as ``heldout``; [] without them.
    heldout_curve: list[dict[str, Any]] = field(default_factory=list)
    #: For the divergence and each spike (the first 20): which precursor signal left its running band first and
    #: how many steps it led the loss, ``[{"event", "step", "signal", "left_band_at", "lead_steps", "also"}]``
    #: (andrea_lab.fit.stability.bands); [] without the monitor's precursors or without events.
    gave_way_first: list[dict[str, Any]] = field(default_factory=list)
    #: What makes the run reproducible: corpus and tokenizer hashes, split sizes (see RunSummary).
    data: dict[str, Any] = field(default_factory=dict)
    #: Package versions of the process that trained (python, torch, lightning, andrea-lab, ...).
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    #: What it ran on: precision, device, machine kind, CPU model and bf16 flags (andrea_lab.runs.machine).
    machine: dict[str, Any] = field(default_factory=dict)
    #: The training hyperparameters besides the architecture (warmup_steps, weight_decay, ...).
    training: dict[str, Any] = field(default_factory=dict)
    plugins: dict[str, dict[str, Optional[str]]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def diverged(self) -> bool:
        return self.status == "diverged"

    @property
    def headline_loss(self) -> Optional[float]:
        """The held-out loss, else (runs without the held-out evaluation) the last in-training one."""
        if self.heldout is not None and self.heldout.loss is not None:
            return self.heldout.loss
        return self.final_val_loss

    @property
    def divergence_kind(self) -> Optional[str]:
        return (self.divergence or {}).get("kind")

    @property
    def divergence_step(self) -> Optional[int]:
        return (self.divergence or {}).get("step")

    @property
    def divergence_cause(self) -> Optional[str]:
        """What failed in a ``trained_then_diverged`` run (``loss_rose`` or ``nonfinite``); None otherwise."""
        return (self.divergence or {}).get("cause")

    @property
    def nonfinite(self) -> bool:
        """Whether the run ended in a non-finite loss or gradient (its final weights are not a model)."""
        return NONFINITE in (self.divergence_kind, self.divergence_cause)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunRecord":
        """Read a summary.json of schema 1 or 2; unknown keys are ignored, missing ones take defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values.setdefault("status", "interrupted")
        heldout = values.get("heldout")
        if isinstance(heldout, dict):
            heldout_fields = {f.name for f in dataclasses.fields(HeldOut)}
            values["heldout"] = HeldOut(**{k: v for k, v in heldout.items() if k in heldout_fields})
        if not isinstance(values.get("divergence"), dict):
            values["divergence"] = {"step": None, "kind": None}
        return cls(**values)


def read_record(run_dir: str | Path) -> Optional[RunRecord]:
    """The run's summary.json as a :class:`RunRecord`, or None when it has none (or it is unreadable)."""
    data = read_json(Path(run_dir) / SUMMARY_FILE)
    if data is None:
        return None
    try:
        return RunRecord.from_json(data)
    except TypeError:  # a damaged or foreign file: treated as no record
        return None


def write_record(run_dir: str | Path, record: RunRecord) -> Path:
    """Write ``summary.json`` atomically; a status or divergence kind outside the schema's lists is a bug
    in the writer, refused here rather than found by a reader (readers stay lenient: :meth:`RunRecord.from_json`)."""
    if record.status not in STATUSES or record.divergence_kind not in (None, *DIVERGENCE_KINDS):
        raise ValueError(
            f"run record with status {record.status!r} and divergence kind {record.divergence_kind!r}; "
            f"valid: statuses {', '.join(STATUSES)}, kinds {', '.join(DIVERGENCE_KINDS)} or none"
        )
    path = Path(run_dir) / SUMMARY_FILE
    write_json_atomic(path, record.to_json())
    return path


# ---------------------------------------------------------------------------------------- names


def format_lr(lr: float) -> str:
    """A learning rate as a short, exact-enough label: 0.003 -> '3e-3', 0.0015 -> '1.5e-3', 1.0 -> '1e0'."""
    mantissa, exponent = f"{lr:.6e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def run_version(lr: float, seed: int) -> str:
    """The directory name of one run inside its variant's directory: ``lr3e-3-seed0``."""
    return f"lr{format_lr(lr)}-seed{seed}"


_VERSION_RE = re.compile(r"^lr(?P<lr>[0-9.]+e-?[0-9]+)-seed(?P<seed>[0-9]+)$")


def parse_run_version(name: str) -> Optional[tuple[float, int]]:
    """``(lr, seed)`` from a directory name written by :func:`run_version`, else None."""
    match = _VERSION_RE.match(name)
    if not match:
        return None
    return float(match["lr"]), int(match["seed"])


# ---------------------------------------------------------------------------------------- states


def run_state(run_dir: Path) -> str:
    """``new``, ``finished``, ``diverged``, ``failed`` or ``interrupted``: the one resume rule.

    * ``new`` — the directory does not exist;
    * ``finished`` / ``diverged`` — done: ``summary.json`` says so, or, without one, the sweep's done
      marker is there (written only after the fit exited 0);
    * ``failed`` — the fit exited non-zero (the failed marker);
    * ``interrupted`` — anything else (a fit killed midway, or summary status ``interrupted``).
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return "new"
    summary = read_json(run_dir / SUMMARY_FILE)
    if summary is not None:
        status = summary.get("status")
        if status in DONE_STATES:
            return status
        if status == "interrupted":
            return "interrupted"
    done = read_json(run_dir / DONE_MARKER)
    if done is not None:
        return done.get("status") if done.get("status") in DONE_STATES else "finished"
    if (run_dir / FAILED_MARKER).exists():
        return "failed"
    return "interrupted"


def move_aside(run_dir: Path, reason: str) -> Path:
    """Rename an unfinished run directory to ``<dir>.<reason>-<timestamp>`` (never deleted)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.{reason}-{stamp}")
    counter = 1
    while target.exists():
        target = run_dir.with_name(f"{run_dir.name}.{reason}-{stamp}-{counter}")
        counter += 1
    os.rename(run_dir, target)
    return target


def is_aside(path: Path) -> bool:
    """A run directory moved aside by the sweep (ignored by ``andrea compare``)."""
    return any(tag in Path(path).name for tag in ASIDE_TAGS)


def is_comparison_run(path: Path) -> bool:
    """``andrea compare``'s report directory (or its temporary twin while it is written): not a run."""
    return Path(path).name.startswith(COMPARISON_RUN)


def resume_checkpoint(run_dir: str | Path) -> Optional[Path]:
    """The checkpoint a run continues from: the newer of ``preempted.ckpt`` and ``last.ckpt`` (a run resumed
    after a preemption goes on saving ``last.ckpt``), or None when it has neither."""
    candidates = [Path(run_dir) / name for name in (PREEMPTED_CHECKPOINT, LAST_CHECKPOINT)]
    present = [path for path in candidates if path.is_file()]
    return max(present, key=lambda path: path.stat().st_mtime_ns) if present else None


def preempted_checkpoint(run_dir: str | Path) -> Optional[Path]:
    """The preemption checkpoint written by the run's latest attempt (newer than its ``sweep-run.json``),
    with its manifest complete; None when the latest attempt was not preempted."""
    path = Path(run_dir) / PREEMPTED_CHECKPOINT
    manifest = manifest_path(path)
    if not (path.is_file() and manifest.is_file()):
        return None
    started = Path(run_dir) / START_MARKER
    if started.is_file() and started.stat().st_mtime_ns > path.stat().st_mtime_ns:
        return None  # left by an earlier attempt, which was resumed and then ended otherwise
    return path


# ---------------------------------------------------------------------------------------- settings


#: Flags that say where a run is or continues from, not what it trains (a moved runs directory is the same run).
WHERE_FLAGS = ("--ckpt_path", "--trainer.logger.init_args.save_dir")


def _options(argv: list[str]) -> dict[str, tuple[str, ...]]:
    """A fit's command line after ``fit`` as ``{--flag: values}`` (a repeated flag keeps every value,
    in order), without :data:`WHERE_FLAGS`."""
    options: dict[str, tuple[str, ...]] = {}
    i = 0
    while i < len(argv):
        flag, value = argv[i], ""
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        i += 1
        if flag not in WHERE_FLAGS:
            options[flag] = (*options.get(flag, ()), value)
    return options


_UNSET = object()


def _saved_config(run_dir: Path) -> Any:
    """The run's own ``config.yaml`` (the resolved config LightningCLI saved); ``_UNSET`` when it is not there
    or cannot be read as YAML."""
    try:
        return read_yaml(run_dir / "config.yaml", "a run's saved config")
    except UsageError:
        return _UNSET


def _recorded_setting(config: Any, flag: str) -> Any:
    """The value a saved config holds for ``--a.b.c``; ``_UNSET`` when the key is not there."""
    node = config
    for part in flag.removeprefix("--").split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _as_yaml(value: str) -> Any:
    """A command-line value as the parser would read it (YAML), within :mod:`andrea_lab.safe_yaml`'s bounds:
    the value comes from a suite or a recorded command; text past the bounds stays text."""
    try:
        check_bounds(value)
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def settings_difference(run_dir: str | Path, command: list[str]) -> Optional[str]:
    """How ``command`` differs from the fit command recorded in the run's ``sweep-run.json`` (None when
    it does not, or nothing was recorded): ``--trainer.max_steps 250 -> 500; ...``.

    An option the command adds that the recorded one lacked is no difference when the run's saved
    ``config.yaml`` already holds that value: a suite that pins what its base config used to give (so
    that a change of the base does not change the suite) still counts its finished runs as done."""
    run_dir = Path(run_dir)
    recorded = (read_json(run_dir / START_MARKER) or {}).get("command")
    if not isinstance(recorded, list) or "fit" not in recorded or "fit" not in command:
        return None
    before = _options([str(a) for a in recorded[recorded.index("fit") + 1 :]])
    after = _options(list(command[command.index("fit") + 1 :]))

    saved: list[Any] = []  # the saved config, read once, and only when an added option needs it

    def pinned_as_it_ran(flag: str) -> bool:
        if flag in before or len(after[flag]) != 1:
            return False
        if not saved:
            saved.append(_saved_config(run_dir))
        held = _recorded_setting(saved[0], flag)
        return held is not _UNSET and held == _as_yaml(after[flag][0])

    changed = [
        f"{flag} {' '.join(before.get(flag, ('(unset)',)))} -> {' '.join(after.get(flag, ('(unset)',)))}"
        for flag in sorted(set(before) | set(after))
        if before.get(flag) != after.get(flag) and not pinned_as_it_ran(flag)
    ]
    return "; ".join(changed) or None
