"""Each variant's size and training tokens as the sweep would run it: what this proxy measured a claim on,
printed beside the published result the claim cites (andrea_lab.experiments.compare.measured).

Why counted and not written in the suite: a variant's overrides change its size (24 blocks against 12, a
matched MLP ratio), and a typed figure drifts from what runs. Counted as a ladder's rungs are
(:func:`andrea_lab.experiments.sweep.ladder_compute.rung_compute`: the model built on the meta device from the
parsed command, tokens = steps x batch x block size), from one planned run per variant: the LR and seed do not
change either figure.
"""

from __future__ import annotations

from typing import Collection

from andrea_lab.experiments.compare.measured import Setup
from andrea_lab.experiments.sweep.ladder_compute import rung_compute
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import Suite, SuiteError


def variant_setups(suite: Suite, variants: Collection[str]) -> dict[str, Setup]:
    """``{variant: Setup}`` for each of ``variants`` the suite has; a variant whose command does not say its
    steps or batch size (rung_compute refuses it) is left out, and its figures print as not counted."""
    names = [variant.name for variant in suite.variants if variant.name in set(variants)]
    if not names or suite.scales:  # a scaled suite's variants differ per scale; it is judged per scale
        return {}
    specs = plan_sweep(suite, "runs", lrs=suite.lrs[:1], seeds=suite.seeds[:1], variants=names)
    setups = {}
    for spec in specs:
        try:
            compute = rung_compute(spec)
        except SuiteError:
            continue
        setups.setdefault(spec.variant, Setup(compute.parameters, compute.tokens))
    return setups
