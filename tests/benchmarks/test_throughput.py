"""benchmarks/throughput (the package; benchmarks/throughput.py runs it): the FLOP formula against hand arithmetic, the
optimizer parity of the
variants, and a 2-step smoke run of the whole benchmark writing its JSON. No wall-clock assertions."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea
from benchmarks.throughput import flops, variants
from benchmarks.throughput.settings import ADAMW_HPARAMS
from benchmarks.throughput.variants import ABLATIONS, BASE, VARIANTS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "throughput.py"


def test_flops_per_token_of_andrea_micro_by_hand():
    # andrea-micro: vocab 257, d 64, 2 layers, 2 heads, block 64, MLP 4x = 256, biases.
    d, L, V, T, h = 64, 2, 257, 64, 256
    layer_norms = 2 * (2 * d)  # gain + bias, two per block
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    mlp = (d * h + h) + (h * d + d)
    blocks = L * (layer_norms + attention + mlp)
    assert blocks == 99_968
    N = V * d + blocks + 2 * d  # tied embedding once + blocks + final LayerNorm; no positions
    assert N == 116_544
    expected = 6 * N + 12 * L * d * T  # PaLM: 6N + 12·L·H·Q·T with H·Q = d
    assert expected == 797_568

    fl = flops.flops_per_token(preset("andrea-micro"), 64)
    assert fl["N"] == N
    assert fl["dense"] == 6 * N
    assert fl["attention"] == 12 * L * d * T
    assert fl["total"] == expected


def test_flops_per_token_of_andrea_120m_by_hand():
    # The spec: 92,331,264 parameters stored; the position table (1024 x 768) is not in N.
    fl = flops.flops_per_token(preset("andrea-120m"))
    assert fl["parameters"]["total"] == 92_331_264
    assert fl["N"] == 92_331_264 - 1024 * 768 == 91_544_832
    assert fl["total"] == 6 * 91_544_832 + 12 * 12 * 768 * 1024 == 662_515_200
    # The attention term follows the sequence length actually trained on.
    assert flops.flops_per_token(preset("andrea-120m"), 256)["attention"] == 12 * 12 * 768 * 256


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"activation": "swiglu"},
        {"norm_placement": "post"},
        {"bias": False},
        {"activation": "relu", "mlp_ratio": 2.0},
    ],
)
def test_parameter_counts_match_the_model(changes):
    config = preset("andrea-micro", **changes)
    counts = flops.parameter_counts(config)
    assert counts["total"] == Andrea(config).num_parameters()
    assert counts["position_embedding"] == config.block_size * config.d_model


def test_bare_loop_optimizer_is_andrea_lms():
    """(c) gets its AdamW from adamw_like_andrea; it must be what AndreaLM.configure_optimizers builds."""
    from andrea_lab.fit.module import AndreaLM

    config = preset("andrea-micro")
    lm = AndreaLM(config=config, decay_steps=10, **ADAMW_HPARAMS)
    theirs = lm.configure_optimizers()
    ours, scheduler = variants.adamw_like_andrea(lm.model, torch.device("cpu"), decay_steps=10)
    reference = theirs["optimizer"]
    assert len(ours.param_groups) == len(reference.param_groups)
    for mine, ref in zip(ours.param_groups, reference.param_groups):
        assert [id(p) for p in mine["params"]] == [id(p) for p in ref["params"]]
        for key in ("lr", "betas", "eps", "weight_decay", "fused", "foreach", "amsgrad", "maximize"):
            assert mine[key] == ref[key], key
    ref_scheduler = theirs["lr_scheduler"]["scheduler"]
    assert [f(s) for f in scheduler.lr_lambdas for s in range(12)] == [
        f(s) for f in ref_scheduler.lr_lambdas for s in range(12)
    ]


def test_hf_gpt2_has_andreas_shape():
    pytest.importorskip(
        "transformers", reason="transformers is not installed: (c) HF GPT-2 is skipped (pip install -e '.[bench]')"
    )
    config = preset("andrea-micro")
    model = variants.hf_gpt2(config)
    assert sum(p.numel() for p in model.parameters()) == Andrea(config).num_parameters()
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.config._attn_implementation == "sdpa"
    assert model.config.n_positions == config.block_size


def test_every_ablation_changes_one_of_the_three_variants():
    assert tuple(name for name in VARIANTS if name in BASE) == BASE == ("lightning", "bare", "hf")
    assert all(row.kind in BASE for row in VARIANTS.values())
    assert len({row.short for row in VARIANTS.values()}) == len(VARIANTS), "one printed label each"
    defaults = variants.Ablation("x", "bare", "", "")
    for name, row in ABLATIONS.items():
        changed = [
            f
            for f in (
                "module",
                "fused",
                "hf_activation",
                "compile",
                "logger",
                "progress_bar",
                "num_workers",
                "model_config",
                "lm_args",
            )
            if getattr(row, f) != getattr(defaults, f)
        ]
        assert len(row.model_config) + len(row.lm_args) <= 1, name
        assert len(changed) <= 1 or name == "a-cli", (name, changed)  # a-cli: andrea fit's callbacks and its bar


@pytest.mark.parametrize("name", ["a-unfused", "b-unfused"])
def test_unfused_ablations_train_with_the_librarys_foreach_adamw(name):
    lm = variants.andrea_lm(preset("andrea-micro"), _settings(), VARIANTS[name])
    optimizer = lm.configure_optimizers()["optimizer"]
    assert not optimizer.param_groups[0]["fused"]
    assert (
        variants.andrea_lm(preset("andrea-micro"), _settings())
        .configure_optimizers()["optimizer"]
        .param_groups[0]["fused"]
    )


@pytest.mark.parametrize(
    "name, changed", [("attn_softcap", ("attn_logit_softcap", 50.0)), ("final_softcap", ("final_logit_softcap", 30.0))]
)
def test_intervention_rows_train_the_changed_model(name, changed):
    lm = variants.andrea_lm(preset("andrea-micro"), _settings(), VARIANTS[name])
    assert getattr(lm.config, changed[0]) == changed[1] and lm.hparams.z_loss == 0
    assert variants.andrea_lm(preset("andrea-micro"), _settings(), VARIANTS["z_loss"]).hparams.z_loss == 1e-4
    assert VARIANTS[name].unavailable(preset("andrea-micro")) is None


def test_a_row_setting_an_option_this_andrea_lab_lacks_is_skipped_saying_why():
    config = preset("andrea-micro")
    unknown = variants.Ablation(
        "x", "lightning", "", "", model_config=(("no_such_field", True),), lm_args=(("no_such_arg", 1),)
    )
    assert (
        unknown.unavailable(config) == "model.config.no_such_field, model.no_such_arg: not an option of this andrea-lab"
    )
    plugin = variants.Ablation("y", "lightning", "", "", model_config=(("activation", "andrea-lab:nope"),))
    assert "nope" in plugin.unavailable(config)
    from benchmarks.throughput.cli import _skipped

    assert _skipped(["bare", "final_softcap"], config) == {}


def _settings():
    from benchmarks.throughput.settings import BenchSettings

    return BenchSettings(
        preset="andrea-micro",
        batch_size=2,
        block_size=32,
        steps=1,
        warmup=1,
        rounds=1,
        device="cpu",
        precision="32-true",
        compile=False,
        num_workers=0,
        logger="none",
        log_every_n_steps=1,
        corpus="synthetic",
        seed=0,
        variants=["bare"],
    )


@pytest.mark.parametrize(
    "changes, twin",
    [
        ({}, True),
        ({"norm_placement": "pre"}, True),
        ({"norm_placement": "post"}, False),
        ({"activation": "swiglu"}, False),
        ({"activation": "relu"}, False),
        ({"bias": False}, False),
    ],
)
def test_one_hf_twin_guard_reads_the_resolved_plugins(changes, twin):
    """Presets name plugins qualified (``andrea-lab:pre``): the guard compares classes, not spellings."""
    problem = variants.hf_twin_problem(preset("andrea-micro", **changes))
    assert (problem is None) == twin, problem
    if not twin:  # refused before transformers is needed
        with pytest.raises(ValueError, match="not GPT-2's"):
            variants.hf_gpt2(preset("andrea-micro", **changes))


def documented_commands() -> list[str]:
    """The benchmark command lines docs/performance.md tells a reader to run (not the ``$ `` transcripts,
    some of which name ablations of older code that the page says are gone)."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [
        line.split("#")[0].split("python benchmarks/throughput.py", 1)[1]
        for line in text.splitlines()
        if line.strip().startswith("python benchmarks/throughput.py")
    ]


def test_the_documented_command_lines_are_accepted():
    from benchmarks.throughput.cli import parse_args, settings_from_args

    commands = documented_commands()
    assert len(commands) >= 4
    for command in commands:
        args = parse_args(command.split())
        settings = settings_from_args(args, torch.device(args.device))
        assert settings.preset in ("andrea-tiny", "andrea-small", "andrea-120m"), command


@pytest.mark.slow
def test_smoke_run_writes_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny ops; also spares a shared machine
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--preset",
            "andrea-micro",
            "--batch-size",
            "2",
            "--block-size",
            "32",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--rounds",
            "1",
            "--ablations",
            "a-nocheck",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "(a)/(b) Lightning / bare" in proc.stdout
    report = json.loads(out.read_text())

    machine = report["machine"]
    for key in (
        "cpu_model",
        "cpu_count",
        "torch",
        "device",
        "device_name",
        "date",
        "load_average_start",
        "load_average_end",
        "torch_threads",
    ):
        assert key in machine, key
    assert len(machine["load_average_start"]) == 3

    fl = report["flops_per_token"]
    assert fl["total"] == 6 * fl["N"] + 12 * 2 * 64 * 32 and "6*N" in fl["formula"]
    assert report["tokens_per_step"] == 2 * 32
    assert report["matmul_peak"]["flops_per_s"] > 0 and report["matmul_peak"]["dtype"] == "float32"

    figures = (
        "tokens_per_s",
        "ms_per_step",
        "peak_memory_bytes",
        "mfu",
        "data_wait_fraction",
        "cpu_ms_per_step",
        "mfu_cpu_time",
        "step_ms",
        "data_wait_ms",
        "rounds",
    )
    hf_available = importlib.util.find_spec("transformers") is not None
    measured = ["lightning", "bare", "a-nocheck"] + (["hf"] if hf_available else [])
    for name in measured:
        variant = report["variants"][name]
        for key in figures:
            assert key in variant, (name, key)
        assert len(variant["step_ms"]) == 2
        assert variant["tokens_per_s"] > 0 and variant["mfu"] > 0
        assert 0 <= variant["data_wait_fraction"] < 1
        assert variant["peak_memory_bytes"] >= 0
    assert report["ratios"]["lightning_over_bare"]["pooled_median"] > 0
    assert report["ratios"]["ablations"]["a-nocheck"]["pooled_median"] > 0
    if hf_available:
        assert report["ratios"]["bare_over_hf"]["pooled_median"] > 0
    else:
        assert "transformers" in report["variants"]["hf"]["skipped"]
        assert report["ratios"]["bare_over_hf"] is None
    assert isinstance(report["targets"], list)
