"""The per-LR table's attention columns: each run's final max attention logit and minimum attention entropy.

Why per learning rate: the instability QK-layernorm and z-loss address (Wortsman et al. 2023; Dehghani et
al. 2023) is attention-logit growth at high learning rates — logits that grow until the softmax is one-hot
(entropy near 0) and the loss stalls or diverges. The loss table says *that* a run failed; these columns
say whether its attention logits blew up on the way, at each LR of the grid.

The values are :mod:`andrea_lab.experiments.compare.runs_table`'s ``attn_logit_max_final`` / ``attn_entropy_min_final``
(from summary.json, else from the probe's last values). A column is shown only when some run has its
value, so a suite whose runs recorded neither keeps its table exactly as before.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Protocol, Sequence

import pandas as pd

from andrea_lab.experiments.compare.runs_table import ATTN_ENTROPY_MIN_FINAL, ATTN_LOGIT_MAX_FINAL


class HasRuns(Protocol):
    """What these columns read of a variant (compare.Variant): its counted runs, one row each. A protocol, not
    an import of compare, which builds its Column objects from the specs here (no cycle, not even for types)."""

    rows: pd.DataFrame


def mean_sd_3g(values: pd.Series) -> str:
    """``mean ± sd`` over seeds to three significant digits (logits range from ~1 to ~1e3); ``n/a`` when no
    run has a finite value (a run that blew up has none)."""
    values = pd.to_numeric(values, errors="coerce").astype(float)
    values = values[values.map(math.isfinite)]
    if values.empty:
        return "n/a"
    text = f"{float(values.mean()):.3g}"
    return text if len(values) < 2 else f"{text} ± {float(values.std(ddof=1)):.2g}"


#: ``(key, label, value of a per-LR cell)`` of each attention column; compare.per_lr_columns makes Columns of them.
ATTENTION_COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [
    (ATTN_LOGIT_MAX_FINAL, "final max attn logit", lambda c: mean_sd_3g(c.rows[ATTN_LOGIT_MAX_FINAL])),
    (ATTN_ENTROPY_MIN_FINAL, "min attn entropy", lambda c: mean_sd_3g(c.rows[ATTN_ENTROPY_MIN_FINAL])),
]


def _has(variants: Sequence[HasRuns], column: str) -> bool:
    return any(column in v.rows and v.rows[column].notna().any() for v in variants)


def attention_columns(variants: Sequence[HasRuns]) -> list[tuple[str, str, Callable[[Any], str]]]:
    """The :data:`ATTENTION_COLUMNS` that some counted run of ``variants`` has a value for."""
    return [column for column in ATTENTION_COLUMNS if _has(variants, column[0])]


#: The legend's line of each attention column (appended to the report's legend only when the column is shown).
ATTENTION_LEGEND = {
    ATTN_LOGIT_MAX_FINAL: "- **final max attn logit**: the largest attention logit over blocks at the run's last "
    "probe, mean ± sd over seeds; its runaway growth at high LR is what QK-layernorm and "
    "z-loss address.",
    ATTN_ENTROPY_MIN_FINAL: "- **min attn entropy**: the lowest attention entropy (nats) over blocks at the run's "
    "last probe, mean ± sd over seeds; near 0 is a one-hot softmax (attention collapse).",
}


def attention_legend(variants: Sequence[HasRuns]) -> str:
    """The legend's lines for the attention columns shown; empty when none is, so the legend stays as it was."""
    return "".join(ATTENTION_LEGEND[key] + "\n" for key, _, _ in attention_columns(variants))
