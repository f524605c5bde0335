"""The TensorBoard custom-scalars layout of the stability metrics: one chart per group of curves, so
that every block of every selected run lands in the same chart (StabilityMonitor writes it once per fit)."""

from __future__ import annotations

import re

from andrea_lab.fit.stability import (
    precursors,  # noqa: F401  (registers the precursor metrics in probe.METRICS)
    probe,
)
from andrea_lab.runs import tags

#: TensorBoard custom-scalars layout: one chart per group of per-layer curves (tags are regexes), so every
#: block of every selected run lands in the same chart. The probe's charts come from its metrics.
_STEP_CHARTS = [
    ("stability: loss and events", "loss (train, val, EMA)", (tags.TRAIN_LOSS, tags.VAL_LOSS, tags.LOSS_EMA)),
    ("stability: loss and events", "spikes (cumulative)", (tags.SPIKES,)),
    ("stability: loss and events", "global gradient norm before clipping", (tags.TRAIN_GRAD_NORM,)),
    ("stability: loss and events", "learning rate", (tags.TRAIN_LR,)),
]


#: The 0/1 flags (non-finite, diverged, stuck, blew up, trained then diverged) have no chart here: custom scalars
#: colour every line of a run alike and smooth every line (0.6 by default), so a flag beside the constant 1 that
#: held its axis read "diverged = 1" for a healthy run, and a flag alone is smoothed to 0.62 or pushed off its
#: axis by outlier scaling. A flag is a fact about a run: HParams shows it as a number per run (hparams/diverged,
#: stability/outcome/*), the Scalars dashboard as its own chart per tag, and compare's Text says how runs ended.


def custom_scalars_layout() -> dict[str, dict[str, list]]:
    """``{section: {chart: ["Multiline", [tag regex, ...]]}}`` for ``SummaryWriter.add_custom_scalars``."""
    entries = [(section, title, f"^{re.escape(tag)}$") for section, title, names in _STEP_CHARTS for tag in names]
    layout: dict[str, dict[str, list]] = {}
    # Which precursor left its band first, before each divergence or spike: its lead in steps (docs/stability.md).
    entries.append(
        (
            "stability: loss and events",
            "gave way first: lead over the loss (steps)",
            f"^{re.escape(tags.GAVE_WAY_FIRST)}/.*$",
        )
    )
    for section, title, regex in entries + probe.layout_entries():
        layout.setdefault(section, {}).setdefault(title, ["Multiline", []])[1].append(regex)
    return layout


CUSTOM_SCALARS_LAYOUT = custom_scalars_layout()
