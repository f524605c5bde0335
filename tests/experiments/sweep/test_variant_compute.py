"""Each variant's size and tokens as the sweep would run it: counted from the suite file, so a variant's
overrides (more blocks, another placement) change its figure and nothing is typed."""

from __future__ import annotations

from pathlib import Path

from andrea_lab.experiments.compare.measured import Setup
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.experiments.sweep.variant_compute import variant_setups

SUITES = Path(__file__).resolve().parents[3] / "experiments" / "suites"


def test_a_deeper_variant_counts_more_parameters_on_the_same_tokens():
    suite = load_suite(SUITES / "depth_confirm.yaml")
    setups = variant_setups(suite, {"pre-12", "pre-24", "not-a-variant"})
    assert set(setups) == {"pre-12", "pre-24"}, "only the suite's variants that were asked for"
    # the suite's common: trainer.max_steps 150, over cpu-base's batch 32 x block 64
    assert setups["pre-24"].tokens == setups["pre-12"].tokens == 150 * 32 * 64
    ratio = setups["pre-24"].parameters / setups["pre-12"].parameters
    assert 1.9 < ratio < 2.0, "twice the blocks; the final norm is not doubled"


def test_cpu_base_is_the_documented_03m_and_nothing_asked_is_nothing_counted():
    suite = load_suite(SUITES / "norm_placement_tuned_confirm.yaml")
    pre = variant_setups(suite, {"pre"})["pre"]
    assert isinstance(pre, Setup) and round(pre.parameters / 1e6, 1) == 0.3
    assert pre.tokens == 250 * 32 * 64  # cpu-base: 250 steps x batch 32 x block 64
    assert variant_setups(suite, set()) == {}
