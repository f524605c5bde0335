"""stream_scale_at_init: the stream's sizes at initialisation, and the model config a suite's fit builds."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_lab.experiments.sweep.preflight import model_config_of
from andrea_lab.experiments.sweep.suite import SuiteError
from andrea_lab.inside.stream_scale import stream_scale_at_init
from andrea_lab.model.config import ConfigError, preset

REPO = Path(__file__).resolve().parents[2]


def micro(**overrides):
    return preset("andrea-micro", block_size=32, **overrides)


def test_the_embedding_is_what_the_first_block_reads_scaled_by_embedding_scale():
    plain, scaled = stream_scale_at_init(micro(), (0,)), stream_scale_at_init(micro(embedding_scale=8.0), (0,))
    assert scaled.embedding_rms == pytest.approx(8 * plain.embedding_rms, rel=1e-5)
    # pre-norm's sublayers read a normed stream: the first update hardly depends on the embedding's scale (only
    # through the norm's epsilon, next to a stream of variance ~1e-3 at init 0.02)
    assert scaled.first_update_rms == pytest.approx(plain.first_update_rms, rel=0.02)
    assert scaled.embedding_power_share > plain.embedding_power_share
    assert scaled.embedding_power_share == pytest.approx((scaled.embedding_rms / scaled.final_rms) ** 2)


def test_a_normed_output_adds_unit_scale_updates_and_buries_the_embedding():
    tuned = dict(init_std=0.125)  # at 0.02 the sublayer's output is small enough for the norm's epsilon to show
    pre, peri = stream_scale_at_init(micro(**tuned)), stream_scale_at_init(micro(norm_placement="peri", **tuned))
    assert peri.first_update_rms == pytest.approx(1.0, abs=0.01)  # LayerNorm output, gain 1, bias 0
    assert pre.first_update_rms < 0.5
    assert peri.embedding_power_share < pre.embedding_power_share / 3
    assert all(math.isfinite(v) for v in (pre.embedding_rms, pre.final_rms, peri.final_rms))


def test_no_seed_is_refused():
    with pytest.raises(ValueError, match="at least one seed"):
        stream_scale_at_init(micro(), ())


def test_the_model_config_is_the_one_the_fit_builds_from_the_suites_overrides_in_order():
    base = REPO / "experiments" / "cpu-base.yaml"
    args = ["--config", str(base), "--model.config.n_layer", "3", "--trainer.max_steps", "5"]
    config = model_config_of([*args, "--model.config.n_layer", "4", "--model.config.embedding_scale", "8.0"])
    assert (config.n_layer, config.embedding_scale, config.d_model) == (4, 8.0, 64)
    with pytest.raises(ConfigError, match=r"embedding_scale must be a number in \[0.001, 1000\]"):
        model_config_of([*args, "--model.config.embedding_scale", "-1"])
    with pytest.raises(SuiteError, match="model.config.no_such_field"):
        model_config_of([*args, "--model.config.no_such_field", "1"])


def test_the_script_prints_one_row_per_variant_of_a_shipped_suite():
    suite = REPO / "experiments" / "suites" / "placements_mechanism.yaml"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "stream_at_init.py"), str(suite), "--seeds", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| - |")]
    assert [row.split("|")[2].strip() for row in rows] == [
        "pre",
        "peri",
        "reordered",
        "pre-emb8",
        "peri-emb8",
        "reordered-emb8",
    ]
