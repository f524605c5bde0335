"""What a report says it scored: the loss's name, the legend that explains the tables, and which held-out
documents judged the claims (the selection/test split, andrea_lab.data.judging_split).

Kept apart from :mod:`andrea_lab.experiments.compare.report` because the words follow the score compare chose
(:func:`andrea_lab.experiments.compare.compare.scored_loss_column`), not the layout of the report.
"""

from __future__ import annotations

from andrea_lab.data.heldout import MAX_DOCUMENT_SHARE
from andrea_lab.experiments.compare import compare
from andrea_lab.experiments.compare.heldout_columns import TEST_LOSS
from andrea_lab.experiments.compare.stats import TOO_FEW_SEEDS


def scored_name(loss_column: str) -> str:
    names = {
        compare.HELDOUT: "held-out loss",
        compare.HELDOUT_BY_DOCUMENT: "held-out loss (document-weighted)",
        TEST_LOSS: "held-out test documents' loss (document-weighted)",
    }
    return names.get(loss_column, "in-training validation loss")


def judged_on(loss_column: str) -> str:
    """Which held-out documents judged a suite's claims and which chose its LRs (andrea_lab.data.judging_split)."""
    if loss_column == TEST_LOSS:
        return (
            "Judged on the held-out test documents; every LR and optimum chosen on the selection documents "
            "(the held-out documents split by family, andrea_lab.data.judging_split)."
        )
    return (
        "Judged on the documents that chose the LRs: chosen and judged on the same documents "
        "(records predate the selection/test split)."
    )


def legend(loss_column: str) -> str:
    by_document = (
        "the held-out loss, document-weighted: windows drawn across all held-out documents at the end of the "
        f"fit, each document's tokens capped so that none carries more than {MAX_DOCUMENT_SHARE:.0%} of the "
        "score (summary.json `heldout.document_loss`; docs/stability.md)"
    )
    by_token = (
        "the held-out loss: windows drawn across all held-out documents at the end of the fit (summary.json `heldout`)"
    )
    in_training = (
        "the last in-training validation loss (these runs predate the held-out evaluation: read "
        "their numbers as the loss of the first held-out files only)"
    )
    strata = (
        "\n- **code / prose loss at best LR** (where runs recorded them): the document-weighted held-out score "
        "within\n  the code and within the English-prose documents (andrea_lab.data.strata), beside the score "
        "over both."
        if loss_column in (compare.HELDOUT_BY_DOCUMENT, TEST_LOSS)
        else ""
    )
    by_test = (
        "the held-out test documents' loss: " + by_document + "; but only over the test part of the held-out "
        "documents (split by family, andrea_lab.data.judging_split), while each LR is chosen on the selection part"
    )
    scored = {compare.HELDOUT_BY_DOCUMENT: by_document, compare.HELDOUT: by_token, TEST_LOSS: by_test}.get(
        loss_column, in_training
    )
    return f"""\
How to read these tables (docs/experiments.md):

- **loss**: {scored}. **capped loss**: min(loss, loss at init): a run stopped as stuck counts at the loss it
  was stopped at (the unigram plateau), a run that blew up (non-finite) at its loss at init,
  which mixes how often a variant gets stuck with how well it trains; **loss of the runs that trained**
  and **failed** keep the two apart.
- **LRs tried**: the variant's tuning budget, the LRs of its grid (a suite may give a variant its own); a claim
  between variants of different budgets is refused unless the suite says `unequal_budgets: true`.
- **best LR (all seeds)**: the LR with the lowest mean capped loss over all seeds (a description).
- **bits/byte at best LR** (where runs recorded it): the held-out loss per byte of text in bits, the scale on
  which byte-level and BPE runs compare.{strata}
- **− reference, LRs chosen on the other seeds [95 % CI]** (the default): for each seed, each variant's LR
  is the best over the *other* seeds, and the seed's paired difference (same seed = same batches and init)
  is taken there; mean, paired-t 95 % interval and the number of seeds n. **at in-sample best LRs
  (secondary)**: each LR chosen on the very seeds compared, which favours each variant on them (the
  winner's curse). **better** / **worse**: the whole interval is below / above 0. **not detected**: it
  contains 0 — which is not "no difference"; more seeds narrow it. "{TOO_FEW_SEEDS}" marks intervals from
  fewer than 3 seeds.
- **Claims**: judged as one family per suite, Holm-adjusted (**Holm p**; the verdict uses it), except
  those marked exploratory (raw p). Intervals everywhere are 95 % and unadjusted.
- **LR sensitivity** (Wortsman et al. 2023): per seed, the mean over the LR grid of the capped loss minus
  its best value; mean ± sd over seeds, and paired against the reference like the loss.
- **failed [exact 95 %]**: failed / counted runs with the Clopper–Pearson interval, a run failing that got
  stuck (never left the unigram plateau), regressed (trained, then rose and stayed above its best) or blew up
  (non-finite, or far above its initial loss); a rise that came back is a spike, not a failure. **Fisher p**:
  two-sided exact test of the failure counts against the reference at that LR (unadjusted).
- **grad norm**: the median of each run's median, and the largest norm after warmup (step 0 excluded: the
  gradients at init are in the initialisation table). **spikes**: summed over the variant's runs.
- **flags**: an optimum at the edge of the LR grid is not bracketed (the true optimum may lie beyond it).
"""
