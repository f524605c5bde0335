"""The columns of ``runs.csv``: which every table has, which are whole numbers, and which a table carries only
when some run has a value (kept apart from :mod:`andrea_lab.experiments.compare.runs_table`, which reads the
runs, because the schema is what every reader and writer of the table shares; the names are imported from
either)."""

from __future__ import annotations

from andrea_lab.experiments.compare import heldout_columns as heldout_columns_module
from andrea_lab.experiments.compare import outcomes
from andrea_lab.runs import committed_table

#: The columns of ``runs.csv``: one per field a comparison reads (the init columns are not written).
RUN_COLUMNS = [
    "suite",
    "variant",
    "variant_index",
    "lr",
    "seed",
    "status",
    "initial_val_loss",
    "final_val_loss",
    "best_val_loss",
    "heldout_loss",
    "heldout_se",
    "heldout_tokens",
    "heldout_documents",
    "divergence_kind",
    "divergence_step",
    "grad_norm_median",
    "grad_norm_max",
    "grad_norm_max_after_warmup",
    "spike_count",
    "steps",
    "warmup_steps",
    "source",
    "path",
]

INTEGER_COLUMNS = (
    "compiled",
    "gave_way_lead",
    "variant_index",
    "seed",
    "heldout_tokens",
    "heldout_documents",
    "divergence_step",
    "spike_count",
    "steps",
    "warmup_steps",
    "stuck_after",
    "scale_index",
    *outcomes.INTEGER_COLUMNS,
)
#: Columns ``runs.csv`` carries only when some run has a value, so that the runs of a suite without a scale
#: axis or attention summaries keep exactly :data:`RUN_COLUMNS` (and the committed reports stay as they are).
SCALE, SCALE_INDEX = "scale", "scale_index"
ATTN_LOGIT_MAX_FINAL, ATTN_ENTROPY_MIN_FINAL = "attn_logit_max_final", "attn_entropy_min_final"
#: ``stuck_after``: the stuck-at-unigram window's first step where the run's config set it (runs made before
#: the suites set it have none, and their committed tables keep their columns).
#: The precision setting and the machine kind of a run (None for runs recorded before they were kept).
PRECISION, MACHINE = "precision", "machine"
#: Whether the fit was compiled (its ``model.compile``, 1 or 0): the other half of the speed path beside the
#: precision. A table carries it only where some run compiled (tables of eager suites keep their columns); ``andrea
#: sweep --from-table`` keeps a rung on its runs' compile from it (compiled bf16 does not rerun eager to the bit).
COMPILED = committed_table.COMPILED
#: The train/held-out split rule's version the run's data was made with (andrea_lab.data.split; "1" for runs
#: recorded before it was kept, all of which used version 1): scores on different splits do not compare.
SPLIT = "split_version"
#: What failed in a ``trained_then_diverged`` run: ``loss_rose`` or ``nonfinite`` (summary.json ``divergence.cause``).
DIVERGENCE_CAUSE = "divergence_cause"
#: The precursor signal that left its band first before the run's divergence (else its first spike), and by how
#: many steps it led the loss (summary.json ``gave_way_first``; docs/stability.md).
GAVE_WAY, GAVE_WAY_LEAD = "gave_way_first", "gave_way_lead"
#: The fit's wall time in seconds (summary.json ``wall_time_s``): what a suite cost here, run by run.
WALL_TIME = "wall_time_s"
#: The torch threads the fit ran on (summary.json ``machine.threads``): wall time x threads is its CPU time,
#: what a ladder's rung costs per decision (compare.ladder.decision_minutes).
THREADS = "threads"
#: When the sweep started the run (``sweep-run.json`` ``started``, ISO 8601): a ladder's prediction must be
#: committed before its top rung's first run, and a committed runs.csv keeps that time where no run directory is.
STARTED = "started"
OPTIONAL_COLUMNS = (
    "stuck_after",
    SCALE,
    SCALE_INDEX,
    ATTN_LOGIT_MAX_FINAL,
    ATTN_ENTROPY_MIN_FINAL,
    PRECISION,
    COMPILED,
    MACHINE,
    SPLIT,
    *heldout_columns_module.OPTIONAL,
    DIVERGENCE_CAUSE,
    GAVE_WAY,
    GAVE_WAY_LEAD,
    *outcomes.OUTCOME_COLUMNS,
    WALL_TIME,
    THREADS,
    STARTED,
)
