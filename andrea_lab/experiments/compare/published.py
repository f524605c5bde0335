"""A published result as a claim cites it: who, what they found, and what they measured it on (model, tokens,
metric, and the kind of quantity), so that "this proxy agrees" compares like with like.

Why structured: a free-text citation let the verdict table say "agrees" where the paper measured one thing and
this proxy another. Xiong et al. 2020 measured BLEU and validation loss of 6-layer Transformers trained with and
without warmup; the committed claims that cite them count runs stuck on the unigram plateau of a 0.3M-parameter
model after 250 steps (issue 56). Same direction, different quantity: the table must say so, not "agrees".
So each cited result names its ``quantity`` from :data:`QUANTITIES`, the vocabulary the claims' own
measurements use (:mod:`andrea_lab.experiments.compare.measured`), and :func:`agreement` says "agrees" only
when the two are the same kind.

A claim's ``published:`` is either the key of a result in the shared list
(:data:`andrea_lab.experiments.compare.published_results.PUBLISHED`: one entry per paper finding, cited by
many claims without copies that drift apart) or a mapping with the same six fields. A figure this project
has not taken from the paper is written ``not stated``, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

#: The kinds of quantity a result can be about, in the words the verdict table prints.
QUANTITIES = {
    "loss": "a loss or score at the end of training (log-perplexity, validation loss, BLEU)",
    "stuck": "runs that never left the unigram plateau",
    "regressed": "runs that trained, then rose and stayed above their best",
    "blew_up": "runs that went non-finite, exploded or spiked",
    "lr_sensitivity": "how much the loss depends on the LR",
    "lr_ceiling": "the highest LR that still trains",
    "gradient_norm": "gradient norms (per layer, at initialisation)",
    "steps_to_loss": "steps (or tokens) needed to reach a given loss",
}
#: What a field says when the figure is not taken from the paper here (absent there, or not checked).
NOT_STATED = "not stated"


@dataclass(frozen=True)
class Published:
    """One paper's finding, in the claim's direction, with what it was measured on."""

    source: str  # "Xiong et al. 2020"
    result: str  # "Post-LN without warmup trains markedly worse"
    quantity: str  # one of QUANTITIES
    model: str  # "6-layer 512-wide Transformer (IWSLT14 De-En)"
    tokens: str  # "65,536 steps of 128 x 512 tokens", or NOT_STATED
    metric: str  # "BLEU, validation loss"

    def describe(self) -> str:
        """``Xiong et al. 2020: <result>; measured: <quantity> on <model>, <tokens> tokens, <metric>``."""
        tokens = "tokens not stated" if self.tokens == NOT_STATED else f"{self.tokens} tokens"
        return (
            f"{self.source}: {self.result}; measured: {self.quantity} on {self.model}, {tokens}, metric {self.metric}"
        )


FIELDS = tuple(field.name for field in fields(Published))


def parse_published(value: Any, known: Mapping[str, Published]) -> Optional[Published]:
    """``published:`` as written in a claim: empty or absent (None), a key of ``known``, or a mapping of the six
    :data:`FIELDS` with a known ``quantity``. Anything else raises ValueError naming what would be valid."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if value in known:
            return known[value]
        raise ValueError(
            f"published {value!r} is not a known published result; use one of {', '.join(sorted(known))} "
            f"(andrea_lab/experiments/compare/published_results.py) or a mapping of {', '.join(FIELDS)}"
        )
    if not isinstance(value, Mapping) or set(value) != set(FIELDS):
        raise ValueError(f"published must be a known result's key or a mapping of exactly {', '.join(FIELDS)}")
    if not all(isinstance(value[name], str) and value[name].strip() for name in FIELDS):
        raise ValueError(f"published's fields are non-empty text (write {NOT_STATED!r} for a figure not taken)")
    if value["quantity"] not in QUANTITIES:
        raise ValueError(f"published quantity {value['quantity']!r} is not one of {', '.join(QUANTITIES)}")
    return Published(**{name: value[name].strip() for name in FIELDS})


def agreement(published: Optional[Published], measured: str, outcome: str) -> str:
    """Whether this proxy agrees with ``published``: "agrees" / "disagrees" only when ``measured`` (the kind of
    quantity the claim's figure is, :func:`andrea_lab.experiments.compare.measured.measured_kind`) is the
    paper's; else "different quantity (paper: X; ours: Y)", whatever the direction. A claim without a verdict
    (an optimum at an edge, too few seeds) is "not judged here". Empty without a citation."""
    if published is None:
        return ""
    if measured != published.quantity:
        return f"different quantity (paper: {published.quantity}; ours: {measured})"
    return {"reproduced": "agrees", "contradicted": "disagrees", "not detected": "not detected here"}.get(
        outcome, "not judged here"
    )
