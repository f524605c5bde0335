"""A third-party distribution that registers ``pre`` and ``gelu`` (the built-ins' names) must not break
anything that relies on the defaults: those name the built-ins qualified (``andrea-lab:pre``), and
``dist:name`` is accepted everywhere a name is. A bare name two distributions register stays the
documented ambiguity error, naming both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from andrea_lab import Andrea, preset
from andrea_lab.cli import main as andrea
from andrea_lab.model.builtin.activations import GELU
from andrea_lab.model.builtin.placements import PreNorm

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("isolated_plugins", "shadowing_distribution")

SHADOW = """
from andrea_lab.model.builtin.activations import GELU
from andrea_lab.model.builtin.placements import PreNorm

class ShadowPre(PreNorm):
    description = "another pre"

class ShadowGelu(GELU):
    description = "another gelu"
"""
AMBIGUOUS = "is registered by more than one distribution: andrea-lab "


@pytest.fixture
def shadowing_distribution(make_distribution):
    make_distribution(
        "andrea-lab-shadow",
        "0.1",
        files={"shadow_plugins.py": SHADOW},
        entry_points={
            "norm_placement": {"pre": "shadow_plugins:ShadowPre"},
            "activation": {"gelu": "shadow_plugins:ShadowGelu"},
        },
    )


def test_the_defaults_select_the_builtins():
    model = Andrea(preset("andrea-micro"))
    assert type(model.blocks[0].attn) is PreNorm and type(model.blocks[0].mlp.sublayer.activation) is GELU


def test_either_distribution_is_selected_by_its_qualified_name():
    model = Andrea(preset("andrea-micro", norm_placement="andrea-lab-shadow:pre", activation="andrea_lab:gelu"))
    assert type(model.blocks[0].attn).__name__ == "ShadowPre"
    assert type(model.blocks[0].mlp.sublayer.activation) is GELU


def test_params_of_a_preset(capsys):
    assert andrea(["params", "--preset", "andrea-micro"]) == 0
    assert "total" in capsys.readouterr().out


def test_params_of_a_config_with_qualified_names_and_with_a_bare_one(tmp_path, capsys):
    config = {
        "model": {
            "config": {
                "vocab_size": 257,
                "d_model": 32,
                "n_layer": 1,
                "n_head": 2,
                "block_size": 16,
                "norm_placement": "andrea-lab:pre",
                "activation": "andrea-lab:gelu",
            }
        }
    }
    path = tmp_path / "qualified.yaml"
    path.write_text(yaml.safe_dump(config))
    assert andrea(["params", "--config", str(path)]) == 0
    capsys.readouterr()
    config["model"]["config"]["norm_placement"] = "pre"
    path.write_text(yaml.safe_dump(config))
    assert andrea(["params", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"norm_placement 'pre' {AMBIGUOUS}" in err and "andrea-lab-shadow 0.1 (shadow_plugins:ShadowPre)" in err
    assert "select one explicitly, e.g. 'andrea-lab:pre'" in err and "Traceback" not in err


def _suite(tmp_path: Path, corpus: Path, placement: str, activation: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "clash",
                "base": str(REPO / "experiments" / "cpu-base.yaml"),
                "common": {"data.corpus": str(corpus), "model.config.activation": activation},
                "lrs": [1e-3],
                "seeds": [0],
                "variants": [{"name": "pre", "overrides": {"model.config.norm_placement": placement}}],
            }
        )
    )
    return path


@pytest.mark.slow
def test_sweep_dry_run(tmp_path, text_corpus, capsys):
    qualified = _suite(tmp_path, text_corpus, "andrea-lab:pre", "andrea-lab:gelu")
    assert andrea(["sweep", str(qualified), "--runs-dir", str(tmp_path / "runs"), "--dry-run"]) == 0
    capsys.readouterr()
    bare = _suite(tmp_path, text_corpus, "pre", "andrea-lab:gelu")
    assert andrea(["sweep", str(bare), "--runs-dir", str(tmp_path / "runs"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "variant 'pre'" in err and f"norm_placement 'pre' {AMBIGUOUS}" in err and "andrea-lab-shadow" in err


def _fit_args(tmp_path: Path) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("two distributions may register the same name; " * 400)
    return [
        "fit",
        "--data.corpus",
        str(corpus),
        "--data.tokenizer",
        "byte",
        "--data.batch_size",
        "4",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--model.config.vocab_size",
        "257",
        "--model.config.block_size",
        "32",
        "--model.config.d_model",
        "32",
        "--model.config.n_layer",
        "1",
        "--model.config.n_head",
        "2",
        "--trainer.max_steps",
        "2",
        "--trainer.val_check_interval",
        "2",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
    ]


def _andrea_process(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """``andrea ...`` in a fresh process that sees the shadowing distribution (as a user's would)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site-packages"), *sys.path]),
        "ANDREA_LAB_CACHE": str(tmp_path / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_fit_with_the_defaults_records_the_builtins(tmp_path):
    result = _andrea_process(tmp_path, *_fit_args(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    (summary,) = (tmp_path / "runs").glob("*/version_0/summary.json")
    plugins = json.loads(summary.read_text())["plugins"]
    assert {kind: (p["name"], p["distribution"]) for kind, p in plugins.items()} == {
        "norm_placement": ("pre", "andrea-lab"),
        "activation": ("gelu", "andrea-lab"),
        "kernel_backend": ("torch", "andrea-lab"),
        "norm": ("layernorm", "andrea-lab"),
        "optimizer": ("adamw", "andrea-lab"),
        "schedule": ("warmup_cosine", "andrea-lab"),
    }


@pytest.mark.slow
def test_fit_with_a_bare_clashing_name_is_one_message(tmp_path):
    result = _andrea_process(tmp_path, *_fit_args(tmp_path), "--model.config.activation", "gelu")
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"activation 'gelu' {AMBIGUOUS}" in result.stderr and "andrea-lab-shadow 0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_andrea_lab_loads_no_plugin():
    # AndreaLM's signature default (an AndreaConfig) is built at import time: it must not select plugins.
    code = textwrap.dedent("""
        import andrea_lab.fit.cli, andrea_lab.fit.module
        from andrea_lab.model.registry import resolve
        print(resolve.cache_info().misses)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
