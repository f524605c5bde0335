"""The CPU precision benchmark at toy size: every setting measured, the table printed, the flags read, the
model's matmul shapes those of its linear layers."""

from __future__ import annotations

import json

import pytest
import torch

from andrea_lab.model.config import AndreaConfig
from benchmarks import cpu_precision


def test_the_model_shapes_are_its_linear_layers_and_head():
    config = AndreaConfig(vocab_size=300, block_size=16, d_model=64, n_layer=2, n_head=1)
    shapes = cpu_precision.model_shapes(config, tokens=32)
    assert len(shapes) == 2 * 4 + 1 and shapes[-1] == (32, 64, 300)
    assert shapes[:4] == [(32, 64, 192), (32, 64, 64), (32, 64, 256), (32, 256, 64)]


def test_the_cpus_bf16_units_are_read_from_its_flags(tmp_path):
    from andrea_lab.runs.machine import cpu_description, has_bf16_units

    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Xeon X\nflags\t\t: fpu avx512f amx_tile amx_bf16\nmodel name\t: Xeon X\n")
    assert cpu_description(info) == {"cpu": "Xeon X", "bf16_flags": ["amx_bf16", "amx_tile", "avx512f"]}
    assert has_bf16_units(["amx_bf16", "amx_tile"]) and has_bf16_units(["avx512_bf16"])
    assert not has_bf16_units(["avx512f"])
    assert cpu_description(tmp_path / "missing")["bf16_flags"] == []


def test_toy_run_prints_every_setting_side_by_side(tmp_path, capsys):
    out = tmp_path / "precision.json"
    args = ["--widths", "64", "--layers", "1", "--batch", "2", "--block", "16", "--vocab", "300", "--steps", "1"]
    assert cpu_precision.main([*args, "--reps", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("CPU: ") and "| d | mm bf16/fp32 |" in printed and "| 64 |" in printed
    (row,) = json.loads(out.read_text())["rows"]
    for setting in cpu_precision.SETTINGS:
        assert row[f"ms_{setting}"] > 0
    assert row["ratio_32-true"] == 1.0 and 0 <= row["matmul_share_bf16_mixed"] <= 1
    assert "where the bf16-mixed step goes at d64" in printed and len(row["top_ops_bf16_mixed"]) == 8
    assert row["fastest_bf16"] in cpu_precision.SETTINGS[1:] and row["of_possible_fastest"] > 0


def test_the_math_attention_setting_is_timed_beside_the_rest(tmp_path, capsys):
    out = tmp_path / "precision.json"
    args = ["--widths", "64", "--layers", "1", "--batch", "2", "--block", "16", "--vocab", "300", "--steps", "1"]
    settings = ["--settings", "bf16-mixed+math-attention"]
    assert cpu_precision.main([*args, "--reps", "1", *settings, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| bf16-mixed+math-attention ms/step |" in printed and "bf16-true" not in printed
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ms_bf16-mixed+math-attention"] > 0 and row["ms_32-true"] > 0 and row["ms_bf16-mixed"] > 0
    # The setting does what it says: the CPU flash-attention kernel is gone from its step (and there without it).
    config = AndreaConfig(vocab_size=300, block_size=16, d_model=64, n_layer=1, n_head=1)
    for setting, flash in (("bf16-mixed", True), ("bf16-mixed+math-attention", False)):
        ops = [key for key, _ in cpu_precision.profile_step(cpu_precision.training_step(config, setting, batch=2))]
        assert any("flash_attention" in key for key in ops) == flash, setting


def test_bad_widths_are_refused_with_the_value(capsys):
    with pytest.raises(SystemExit):
        cpu_precision.main(["--widths", "64,x"])
    assert "'64,x'" in capsys.readouterr().err


def test_an_unknown_setting_is_refused_naming_it_and_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        cpu_precision.main(["--settings", "bf16-mixed,fp8"])
    err = capsys.readouterr().err
    assert "'fp8'" in err and "bf16-mixed+compile" in err


def test_the_fp32_attention_settings_time_the_sweeps_bf16_path(tmp_path, capsys, monkeypatch):
    """The sweep's bf16 path keeps the attention in fp32 (AndreaConfig.cpu_attention_fp32); its compile rule weighs
    a compile's saving against that path, so the benchmark times it, eager and compiled."""
    from andrea_testing import attention_input_dtypes

    out = tmp_path / "precision.json"
    args = ["--widths", "64", "--layers", "1", "--batch", "2", "--block", "16", "--vocab", "300", "--steps", "1"]
    assert (
        cpu_precision.main([*args, "--reps", "1", "--settings", "bf16-mixed+fp32-attention", "--json", str(out)]) == 0
    )
    assert "| bf16-mixed+fp32-attention ms/step |" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ms_bf16-mixed+fp32-attention"] > 0
    seen = attention_input_dtypes(monkeypatch)
    config = AndreaConfig(vocab_size=300, block_size=16, d_model=64, n_layer=1, n_head=1)
    for setting, dtype in (("bf16-mixed", torch.bfloat16), ("bf16-mixed+fp32-attention", torch.float32)):
        step = cpu_precision.training_step(config, setting, batch=2)
        seen.clear()  # building the model may call the attention outside autocast
        step()
        assert seen == [dtype], setting
    assert cpu_precision.setting_model(config, "bf16-mixed+fp32-attention+compile").config.cpu_attention_fp32
