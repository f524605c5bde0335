"""Each rung's 6·N·D from its parsed config; rungs that do not grow refused before any run (issue 54)."""

from __future__ import annotations

import pytest

from andrea_lab.experiments.sweep import ladder_compute
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite
from tests.experiments.sweep.test_ladder import ladder_document, write


def test_rung_compute_counts_non_embedding_parameters_and_tokens(tmp_path):
    suite = load_suite(write(tmp_path, ladder_document()))
    rungs = ladder_compute.ladder_compute(suite, plan_sweep(suite, tmp_path / "runs"))
    small, big = rungs
    # cpu-base: 6 blocks, block_size 64, batch 32, gelu MLP 4x; per block 12 d^2 weights + 13 d biases and norms.
    assert small.parameters == 6 * (12 * 32**2 + 13 * 32) + 2 * 32
    assert (small.tokens, big.tokens) == (10 * 32 * 64, 40 * 32 * 64)
    assert big.flops == 6 * big.parameters * big.tokens
    lines = ladder_compute.for_sweep(suite, plan_sweep(suite, tmp_path / "runs"))
    assert lines[1].startswith(f"ladder rung big: N = {big.parameters:,} non-embedding parameters, D = 81,920 tokens")
    assert lines[1].endswith(f"({big.flops / small.flops:.1f}x the lowest)")


def test_rungs_that_do_not_grow_in_compute_are_refused(tmp_path):
    document = ladder_document()
    document["scales"][1]["overrides"]["trainer.max_steps"] = 1  # wider but 1 step: less compute than small
    suite = load_suite(write(tmp_path, document))
    with pytest.raises(SuiteError, match="rung 'big' trains with 6·N·D = .* not more than rung 'small'"):
        ladder_compute.for_sweep(suite, plan_sweep(suite, tmp_path / "runs"))
