"""The TensorBoard scalar tags of a fit, each spelled once, here: what AndreaLM and the stability monitor's
per-step detectors log, and what the run record, the checkpoint monitor and ``andrea compare`` read.

The stability *probe*'s tags are defined with their metric functions in
:mod:`andrea_lab.fit.stability.probe` (``METRICS``). tests/runs/test_tags.py checks that no other module spells
any of these strings.
"""

TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"
TRAIN_TOKENS = "train/tokens"
TRAIN_GRAD_NORM = "train/grad_norm"  # global norm before clipping
TRAIN_SKIPPED_STEPS = "train/skipped_steps"  # non-finite steps dropped (on_nonfinite: skip)
TRAIN_Z_LOSS = "train/z_loss"  # model.z_loss · mean(log² Z), added to the optimised loss

#: The evaluation loss and perplexity of each evaluation stage (``validate`` logs val/, ``test`` test/).
STAGE_LOSS = {"val": "val/loss", "test": "test/loss"}
STAGE_PERPLEXITY = {"val": "val/perplexity", "test": "test/perplexity"}
VAL_LOSS = STAGE_LOSS["val"]
VAL_PERPLEXITY = STAGE_PERPLEXITY["val"]
#: The held-out loss at the steps a suite fixed in advance (``heldout.at_steps``): a learning curve on the
#: representative windows, for effects in steps (andrea_lab.experiments.compare.steps).
HELDOUT_LOSS = "heldout/loss"

# The stability monitor's per-step event scalars (docs/stability.md).
LOSS_EMA = "stability/loss_ema"
SPIKES = "stability/spikes"
NONFINITE = "stability/nonfinite"
DIVERGED = "stability/diverged"
#: The ways a run diverges that a comparison tells apart (0/1 flags, docs/stability.md): it never trained
#: beyond token frequencies, it blew up before it trained (its loss held well above where it started), or it
#: trained and then failed.
STUCK = "stability/stuck_at_unigram"
BLEW_UP = "stability/blew_up"
TRAINED_THEN_DIVERGED = "stability/trained_then_diverged"
#: How the run ended (andrea_lab.runs.outcome), logged once at its end: a 0/1 flag per outcome below
#: ``stability/outcome/`` (``trained``, ``stuck``, ``regressed``, ``blew_up``), ``recovered_rise`` (a rise that
#: came back: a spike, not a divergence) and ``size`` (nats: a regression's final − best, a blow-up's final −
#: initial; absent where there is none).
OUTCOME = "stability/outcome"
#: Below it, per precursor signal, its lead in steps over a divergence or spike it left its band before
#: (``stability/gave_way_first/attn_logit_max_head/block_00_h1``), logged at the event's step.
GAVE_WAY_FIRST = "stability/gave_way_first"

#: Every tag above (tests/runs/test_tags.py).
ALL = (
    TRAIN_LOSS,
    TRAIN_LR,
    TRAIN_TOKENS,
    TRAIN_GRAD_NORM,
    TRAIN_SKIPPED_STEPS,
    TRAIN_Z_LOSS,
    *STAGE_LOSS.values(),
    *STAGE_PERPLEXITY.values(),
    HELDOUT_LOSS,
    LOSS_EMA,
    SPIKES,
    NONFINITE,
    DIVERGED,
    STUCK,
    BLEW_UP,
    TRAINED_THEN_DIVERGED,
)
