"""What a claim in a suite file says, parsed and checked when the suite loads: its kind, its two variants, and
its options (``text``, ``published``, ``lr``, ``lr_from``, ``exploratory``, ``across``, ``unequal_budgets``,
``margin``); a claim and its mirror image merged into one hypothesis. How a claim is judged:
:mod:`andrea_lab.experiments.compare.claims`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from andrea_lab.experiments.compare.published import Published, parse_published
from andrea_lab.experiments.compare.published_results import PUBLISHED
from andrea_lab.runs.directory import format_lr

#: Claims that count runs by how they ended (andrea_lab.runs.outcome), and the 0/1 column of the counted runs
#: each counts (andrea_lab.experiments.compare.outcomes): a run stuck on the unigram plateau, one that trained
#: and regressed for good, and one that blew up are different failures, and a paper's claim is about one of them
#: (Xiong et al.'s warmup claim is about blow-ups, not about slowness at a high LR). ``fewer_divergences``, the
#: name the committed suites were written with, counts any of the three and its evidence says which they were:
#: read so, those suites' claims keep their pre-registered meaning ("fewer failures") without a rewrite, and
#: the breakdown in the row shows what the count is made of. A rise that came back by the end is none of them.
COUNT_KINDS = {
    "fewer_divergences": "diverged",
    "fewer_stuck": "stuck",
    "fewer_regressions": "regressed",
    "fewer_blowups": "blew_up",
}
CLAIM_KINDS = (
    "lower_loss",
    "lower_loss_trained",
    *COUNT_KINDS,
    "lower_sensitivity",
    "higher_ceiling",
    "equivalent_loss",
    "sensitivity_gap_grows",
)
#: Claims measured over the whole LR grid: they take no ``lr:`` and need both variants on the same grid.
GRID_KINDS = ("lower_sensitivity", *COUNT_KINDS, "higher_ceiling", "sensitivity_gap_grows")
#: Claims about how a difference changes across a suite's scales (an interaction: "A's LR sensitivity minus
#: B's grows with width", Wortsman et al. 2023, Fig. 1), judged once over all scales, never at one
#: (:func:`andrea_lab.experiments.compare.scales.judge_across_scales`); only in a suite with ``scales:``.
ACROSS_SCALES = ("sensitivity_gap_grows",)
CLAIM_OPTIONS = ("text", "published", "lr", "lr_from", "exploratory", "across", "unequal_budgets", "margin")
#: What the runs of a claim must share unless the claim says ``across: [...]``: a difference in the precision,
#: the machine (andrea_lab.runs.machine) or the held-out split (andrea_lab.data.split) would be measured
#: along with the variants'.
MUST_MATCH = ("precision", "machine", "split_version")


@dataclass(frozen=True)
class Claim:
    """``a`` has lower loss / fewer divergences / lower LR sensitivity than ``b``; ``lrs`` = (A's LR, B's LR)
    fixed in advance, None = chosen on the other seeds."""

    kind: str
    a: str
    b: str
    text: str = ""
    lrs: Optional[tuple[float, float]] = None
    exploratory: bool = False
    #: Of :data:`MUST_MATCH`, what the suite compares on purpose (e.g. ``precision`` for bf16 against fp32).
    across: tuple[str, ...] = ()
    #: The suite compares variants tuned over LR grids of different sizes on purpose (``unequal_budgets: true``).
    unequal_budgets: bool = False
    #: Labels of this claim's mirror images the suite also wrote (``B vs A`` of ``A vs B``): one two-sided
    #: hypothesis, counted once in the family (:func:`merge_mirrors`).
    mirrors: tuple[str, ...] = ()
    #: ``equivalent_loss`` only: the equivalence margin in nats, declared before the runs.
    margin: Optional[float] = None
    #: The committed suites whose runs fixed ``lrs`` (``lr_from: [norm_placement]``): where a confirmatory
    #: claim's LR was chosen, so that the project can check it was not chosen on the seeds that judge it
    #: (:func:`andrea_lab.experiments.compare.project.provenance_problems`).
    lr_from: tuple[str, ...] = ()
    #: The published result the claim puts to the test, in the claim's direction, with what the paper measured
    #: (``published: shazeer2020_swiglu_gelu``, or a mapping of its fields: andrea_lab.experiments.compare.
    #: published): the project's verdict table says whether this proxy agrees, on the same kind of quantity.
    published: Optional[Published] = None

    @property
    def label(self) -> str:
        where = ""
        if self.lrs is not None:
            lr_a, lr_b = self.lrs
            where = (
                f" @ {format_lr(lr_a)}"
                if lr_a == lr_b
                else f" @ {self.a} {format_lr(lr_a)}, {self.b} {format_lr(lr_b)}"
            )
        within = "" if self.margin is None else f" within ±{self.margin:g}"
        return f"{self.kind}: {self.a} vs {self.b}{within}{where}" + (" (exploratory)" if self.exploratory else "")


def _bad(item: Any, why: str) -> ValueError:
    return ValueError(
        f"bad claim {item!r}: {why}; expected one of {', '.join(CLAIM_KINDS)} with two variant "
        f"names, e.g. {{lower_loss: [A, B]}}, and optional {', '.join(CLAIM_OPTIONS)}"
    )


def _lr(value: Any, item: Any) -> float:
    try:
        lr = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        lr = math.nan
    if not (math.isfinite(lr) and lr > 0):
        raise _bad(item, f"lr {value!r} is not a learning rate > 0")
    return lr


def _lr_pairs(value: Any, a: str, b: str, item: Any) -> list[Optional[tuple[float, float]]]:
    """``lr:`` as (A's, B's) pairs: a number, ``{A: lr, B: lr}``, or a list of either (one claim each)."""
    if value is None:
        return [None]
    if isinstance(value, list):
        if not value:
            raise _bad(item, "lr is an empty list")
        return [pair for entry in value for pair in _lr_pairs(entry, a, b, item)]
    if isinstance(value, Mapping):
        if set(value) != {a, b}:
            raise _bad(item, f"lr as a mapping names exactly the claim's two variants ({a}, {b})")
        return [(_lr(value[a], item), _lr(value[b], item))]
    lr = _lr(value, item)
    return [(lr, lr)]


def parse_claims(raw: list) -> list[Claim]:
    """Claims from YAML, an ``lr:`` list expanded into one claim per LR."""
    if not isinstance(raw, list):
        raise ValueError(f"claims must be a list, got {type(raw).__name__}")
    claims = []
    for item in raw:
        kinds = [key for key in item if key not in CLAIM_OPTIONS] if isinstance(item, Mapping) else []
        pair = item.get(kinds[0]) if len(kinds) == 1 else None
        if (
            len(kinds) != 1
            or kinds[0] not in CLAIM_KINDS
            or not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(isinstance(name, str) for name in pair)
        ):
            raise _bad(item, "not one claim kind with two variant names")
        kind, (a, b) = kinds[0], pair
        exploratory = item.get("exploratory", False)
        if not isinstance(exploratory, bool):
            raise _bad(item, f"exploratory must be true or false, got {exploratory!r}")
        if kind in ("lower_sensitivity", "higher_ceiling", *ACROSS_SCALES) and item.get("lr") is not None:
            raise _bad(item, f"{kind} is measured over the whole LR grid and takes no lr")
        across = item.get("across", [])
        if not isinstance(across, list) or not all(isinstance(a, str) and a in MUST_MATCH for a in across):
            raise _bad(item, f"across must be a list of {', '.join(MUST_MATCH)}, got {across!r}")
        unequal_budgets = item.get("unequal_budgets", False)
        if not isinstance(unequal_budgets, bool):
            raise _bad(item, f"unequal_budgets must be true or false, got {unequal_budgets!r}")
        margin, lr_from = _margin(item, kind), _lr_from(item)
        try:
            published = parse_published(item.get("published"), PUBLISHED)
        except ValueError as error:
            raise _bad(item, str(error)) from None
        for lrs in _lr_pairs(item.get("lr"), a, b, item):
            claims.append(
                Claim(
                    kind,
                    a,
                    b,
                    str(item.get("text", "")),
                    lrs,
                    exploratory,
                    tuple(across),
                    unequal_budgets,
                    (),
                    margin,
                    lr_from,
                    published,
                )
            )
    return merge_mirrors(claims)


def _margin(item: Any, kind: str) -> Optional[float]:
    """The equivalence margin: required (a positive number of nats) for ``equivalent_loss``, refused elsewhere."""
    margin = item.get("margin")
    if kind != "equivalent_loss":
        if margin is not None:
            raise _bad(item, f"margin is for equivalent_loss claims, not {kind}")
        return None
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < math.inf:
        raise _bad(item, f"equivalent_loss needs margin: a positive number of nats (e.g. 0.02), got {margin!r}")
    return float(margin)


def _lr_from(item: Any) -> tuple[str, ...]:
    """Where the claim's fixed LRs were chosen: a list of suite names, and only beside ``lr``."""
    lr_from = item.get("lr_from")
    if lr_from is None:
        return ()
    if item.get("lr") is None:
        raise _bad(item, "lr_from names the suites that fixed a claim's lr; this claim fixes no lr")
    if not isinstance(lr_from, list) or not lr_from or not all(isinstance(n, str) and n for n in lr_from):
        raise _bad(item, f"lr_from must be a list of suite names (e.g. [norm_placement]), got {lr_from!r}")
    return tuple(lr_from)


def _mirror_key(claim: Claim) -> tuple:
    lrs = None if claim.lrs is None else (claim.lrs[1], claim.lrs[0])
    return (claim.kind, claim.b, claim.a, lrs, claim.exploratory, claim.margin)


def merge_mirrors(claims: Sequence[Claim]) -> list[Claim]:
    """A claim and its mirror image (``lower_loss: [A, B]`` and ``[B, A]`` at mirrored LRs) are one two-sided
    test: counted twice, the Holm family would be larger than the hypotheses it holds, and every adjusted p
    too large. The first written is kept, with the mirror's label in ``mirrors``."""
    kept: list[Claim] = []
    for claim in claims:
        first = next(
            (
                i
                for i, k in enumerate(kept)
                if _mirror_key(k) == (claim.kind, claim.a, claim.b, claim.lrs, claim.exploratory, claim.margin)
            ),
            None,
        )
        if first is None:
            kept.append(claim)
        else:
            kept[first] = dataclasses.replace(kept[first], mirrors=kept[first].mirrors + (claim.label,))
    return kept


# ---------------------------------------------------------------------------------------------- evidence
