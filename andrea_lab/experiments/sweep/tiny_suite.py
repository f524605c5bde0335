"""The tiny real suite that the TensorBoard checks train: two variants (``pre``, and ``post-nowarmup``: post-norm
without warm-up) x two learning rates (1e-3, and 3.0, where both diverge) x one seed, six steps of a
32-wide, 2-block model each.

One definition for its two users, so the screenshots show the sweep the tests check:
``tests/experiments/compare/test_tensorboard_report.py`` reads it through TensorBoard's HTTP API, and
``scripts/tensorboard_screenshots.py`` photographs TensorBoard's dashboards of it (a script must not import
the tests). Each run is the command ``andrea sweep`` plans for it, started as ``andrea sweep`` starts it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.runner import Runner
from andrea_lab.experiments.sweep.suite import load_suite

NAME = "tiny"
#: What makes each run small (on top of the base config, experiments/cpu-base.yaml).
MICRO: dict[str, Any] = {
    "model.config.d_model": 32,
    "model.config.n_layer": 2,
    "model.config.n_head": 2,
    "data.batch_size": 8,
    "data.max_val_batches": 2,
    "heldout.max_tokens": 2048,
    "trainer.limit_val_batches": 2,
    "trainer.num_sanity_val_steps": 2,
    "trainer.max_steps": 6,
    "trainer.val_check_interval": 3,
    "trainer.log_every_n_steps": 1,
    "model.warmup_steps": 2,
    "stability.stuck_after": 2,  # one stuck-at-unigram window for both warmups (andrea_lab/experiments/sweep/suite.py)
}


def write_tiny_suite(path: Path, base: Path, corpus: Path) -> Path:
    """The suite file at ``path``: ``base`` is the experiment YAML (cpu-base.yaml), ``corpus`` the text."""
    path.write_text(
        yaml.safe_dump(
            {
                "name": NAME,
                "base": str(base),
                "common": {**MICRO, "data.corpus": str(corpus)},
                "lrs": [1.0e-3, 3.0],
                "seeds": [0],
                "variants": [
                    {"name": "pre", "overrides": {"model.config.norm_placement": "pre"}},
                    {
                        "name": "post-nowarmup",
                        "overrides": {"model.config.norm_placement": "post", "model.warmup_steps": 0},
                    },
                ],
            }
        )
    )
    return path


def train_tiny_suite(suite: Path, runs_dir: Path) -> Path:
    """Every run of ``suite`` under ``runs_dir`` (``<runs_dir>/tiny/<variant>/lr<lr>-seed0``), one after the
    other, each an ``andrea fit`` subprocess exactly as ``andrea sweep`` starts it; raises RuntimeError naming
    the first run whose fit failed. Returns ``runs_dir``."""
    outcomes = Runner(plan_sweep(load_suite(suite), runs_dir), jobs=1).run()
    failed = next((outcome for outcome in outcomes if outcome.failed), None)
    if failed is not None:
        raise RuntimeError(f"the fit of {failed.spec.label} failed: {failed.detail}")
    return runs_dir
