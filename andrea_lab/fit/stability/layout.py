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


#: The 0/1 flags, each a chart of two lines: the flag and the constant :data:`tags.FLAG_SCALE` = 1, which keeps
#: the axis at [0, 1] (TensorBoard's outlier clipping would otherwise hide a flag that is 1 at one step). Not a
#: margin chart from the flag up to 1: its band filled a solid block for every run that never diverged.
_FLAG_CHARTS = [
    ("stability: loss and events", "non-finite step (0/1)", tags.NONFINITE),
    ("stability: loss and events", "diverged (0/1)", tags.DIVERGED),
    ("stability: loss and events", "stuck at the unigram loss (0/1)", tags.STUCK),
    ("stability: loss and events", "blew up before it trained (0/1)", tags.BLEW_UP),
    ("stability: loss and events", "trained, then diverged (0/1)", tags.TRAINED_THEN_DIVERGED),
]


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
    for section, title, tag in _FLAG_CHARTS:
        layout.setdefault(section, {})[title] = [
            "Multiline",
            [f"^{re.escape(tag)}$", f"^{re.escape(tags.FLAG_SCALE)}$"],
        ]
    return layout


CUSTOM_SCALARS_LAYOUT = custom_scalars_layout()
