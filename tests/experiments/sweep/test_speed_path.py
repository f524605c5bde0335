import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.sweep import speed_path
from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.experiments.sweep.speed_path import BF16_FROM_WIDTH, COMPILE_FROM_WIDTH, Rung, Tabled, apply, choose

WIDE = Rung(d_model=512, steps=250, tokens_per_step=16 * 128, fits=12)


def test_no_bf16_units_means_fp32_eager_at_any_width():
    path = choose(False, WIDE)
    assert (path.precision, path.compile) == ("32-true", False) and "no bf16 units" in path.reason


@pytest.mark.parametrize("width", [16, 48, BF16_FROM_WIDTH - 1])
def test_narrow_models_stay_fp32(width):
    path = choose(True, Rung(d_model=width, steps=100_000, tokens_per_step=4096))
    assert (path.precision, path.compile) == ("32-true", False) and f"d_model {width}" in path.reason


@pytest.mark.parametrize("width", [BF16_FROM_WIDTH, 128, COMPILE_FROM_WIDTH - 1])
def test_from_cpu_base_width_bf16_with_fp32_attention_and_eager_below_where_compiling_was_measured(width):
    # speed_equivalence_d64 showed this path's loss at d64; a compile's saving was measured from d256 only, so
    # neither many steps, many fits nor a warm cache make the rule compile below it.
    rung = Rung(d_model=width, steps=100_000, tokens_per_step=4096, fits=500, cache_warm=True)
    path = choose(True, rung)
    assert (path.precision, path.compile, path.cpu_attention_fp32) == ("bf16-mixed", False, True)
    assert f"d_model {width} >= {BF16_FROM_WIDTH}" in path.reason


def test_wide_models_take_bf16_and_compile_only_where_the_steps_pay_for_it():
    short = choose(True, Rung(d_model=256, steps=50, tokens_per_step=2048, fits=1))
    long = choose(True, Rung(d_model=256, steps=50_000, tokens_per_step=2048, fits=1))
    assert short.precision == long.precision == "bf16-mixed"
    assert (short.compile, long.compile) == (False, True)


def test_the_ladders_d256_rung_compiles_with_a_warm_cache_or_many_fits_and_not_for_one_cold_fit():
    # Measured (docs/performance.md): a compiled d256 step of the ladder's shape saves ~26 s over 500 steps of
    # 64 x 64 tokens; a warm compile costs ~9 s, a cold one ~132 s.
    d256 = Rung(d_model=256, steps=500, tokens_per_step=64 * 64, fits=100, cache_warm=True)
    assert choose(True, d256).compile and "saves ~26 s a fit (500 steps) against ~9 s" in choose(True, d256).reason
    assert not choose(True, dataclasses.replace(d256, fits=1, cache_warm=False)).compile
    assert choose(True, dataclasses.replace(d256, d_model=384)).reason == choose(True, d256).reason.replace(
        "d_model 256", "d_model 384"
    )  # between measured widths: the narrower one's saving


def test_a_compile_shared_by_many_fits_or_already_cached_pays_sooner():
    steps = 400  # pays against a warm compile, not against a whole cold one
    one = Rung(d_model=512, steps=steps, tokens_per_step=2048, fits=1)
    assert not choose(True, one).compile
    assert choose(True, dataclasses.replace(one, cache_warm=True)).compile
    assert choose(True, Rung(d_model=512, steps=steps, tokens_per_step=2048, fits=40)).compile


def _spec(index: int, scale: str, variant: str, overrides=None, root: Path = Path("/nonexistent")) -> RunSpec:
    command = ("python", "-m", "andrea_lab.cli", "fit", "--config", "base.yaml")
    run_dir = root / (scale or "") / variant / str(index)
    return RunSpec(
        index, 4, "s", variant, 1e-3, index, run_dir, command, dict(overrides or {}),
        scale=scale,
    )  # fmt: skip


#: What a bf16 eager path puts at the end of a rung's command.
BF16_EAGER_TAIL = (
    "--trainer.precision",
    "bf16-mixed",
    "--model.compile",
    "false",
    "--model.config.cpu_attention_fp32",
    "true",
)
RUNGS = {"d32": Rung(32, 250, 2048), "d512": Rung(512, 250, 2048)}


def _rung_of(spec: RunSpec) -> Rung:
    return RUNGS[spec.scale]


def test_apply_changes_only_the_rungs_where_the_choice_differs_from_the_config():
    specs = [_spec(1, "d32", "pre"), _spec(2, "d32", "post"), _spec(3, "d512", "pre"), _spec(4, "d512", "post")]
    out, line = apply(specs, "auto", _rung_of, bf16_units=True, recorded=lambda spec: None)
    assert [s.command for s in out[:2]] == [s.command for s in specs[:2]]  # fp32 eager: as cpu-base says
    for spec in out[2:]:
        assert spec.command[-6:] == BF16_EAGER_TAIL
        assert spec.overrides["trainer.precision"] == "bf16-mixed"  # and so in sweep-run.json's overrides
        assert spec.overrides["model.config.cpu_attention_fp32"] is True
    assert line.startswith("speed: fp32 (d_model 32 < 64") and "for d32 pre, d32 post;" in line
    assert "bf16-mixed, fp32 attention (d_model 512 >= 64" in line and line.endswith("for d512 pre, d512 post")


def _widths(**width_of):
    """A rung reader for variants of one rung at their own widths (250 steps of 2,048 tokens)."""
    return lambda spec: Rung(width_of[spec.variant], 250, 2048)


def test_variants_of_one_rung_train_in_one_arithmetic_the_slowest_any_of_them_gets():
    # mlp_ratio's matched variants: d48 (below the threshold) and d76 (above it), in a suite without scales.
    specs = [_spec(1, None, "ratio8"), _spec(2, None, "ratio2")]
    out, line = apply(specs, "auto", _widths(ratio8=48, ratio2=76), bf16_units=True, recorded=lambda spec: None)
    assert [s.command for s in out] == [s.command for s in specs]  # both fp32, as the config says
    assert "d_model 48 < 64" in line and "ratio8's, one path a rung) for ratio8, ratio2" in line
    # Across scales each rung is its own: a d512 rung beside a d32 one keeps its bf16.
    scaled = [_spec(1, "d32", "pre"), _spec(2, "d512", "pre")]
    out, _ = apply(scaled, "auto", _rung_of, bf16_units=True, recorded=lambda spec: None)
    assert out[0].command == scaled[0].command and out[1].command[-6:] == BF16_EAGER_TAIL


def test_within_a_rung_eager_wins_over_compiled():
    specs = [_spec(1, "d512", "short"), _spec(2, "d512", "long")]
    steps = {"short": 50, "long": 50_000}
    read = lambda spec: Rung(512, steps[spec.variant], 2048)  # noqa: E731 - one line
    out, line = apply(specs, "auto", read, bf16_units=True, recorded=lambda spec: None)
    assert all(s.command[-6:] == BF16_EAGER_TAIL for s in out) and "d512 short's, one path a rung" in line


@pytest.mark.parametrize("made_in", ["config", "bf16"])
def test_a_variant_added_to_a_rung_follows_the_runs_made_there(made_in):
    # The ladder's gpt2_init joined d64 and d96 after their other variants had run in fp32.
    specs = [_spec(1, "d64", "pre"), _spec(2, "d64", "gpt2_init")]
    bf16 = {"trainer.precision": "bf16-mixed", "model.compile": False, "model.config.cpu_attention_fp32": True}
    earlier = {} if made_in == "config" else bf16  # {}: made as the config says, before the rule chose
    read = lambda spec: Rung(64, 250, 2048)  # noqa: E731 - the rule alone would take bf16 here
    out, line = apply(specs, "auto", read, bf16_units=True, recorded=lambda s: earlier if s.variant == "pre" else None)
    if made_in == "config":
        assert [s.command for s in out] == [s.command for s in specs]
        assert "as d64 pre's runs were made, one path a rung" in line
    else:
        assert all(s.command[-6:] == BF16_EAGER_TAIL for s in out)


def test_runs_a_filter_leaves_out_count_for_the_rung(tmp_path):
    # andrea sweep --variants gpt2_init (or --seeds 605): pre's runs, made at d64 as the config says, are not
    # planned this time, but the rung's path is theirs; the line names only what this sweep runs.
    read = lambda spec: Rung(64, 250, 2048)  # noqa: E731 - the rule alone would take bf16 here
    made = {"pre"}
    added = [_spec(2, "d64", "gpt2_init")]
    out, line = apply(
        added,
        "auto",
        read,
        True,
        recorded=lambda s: {} if s.variant in made else None,
        siblings=[_spec(1, "d64", "pre")],
    )
    assert (
        out == added
        and line == "speed: as the config says (as d64 pre's runs were made, one path a rung) for d64 gpt2_init"
    )
    alone, _ = apply(added, "auto", read, True, recorded=lambda s: None)
    assert alone[0].command[-6:] == BF16_EAGER_TAIL  # without the sibling: the rule's own choice
    # A new seed of a variant whose other seeds were made keeps their path too.
    new_seed = [_spec(9, "d64", "pre")]
    out, line = apply(
        new_seed, "auto", read, True, recorded=lambda s: {} if s.index == 1 else None, siblings=[_spec(1, "d64", "pre")]
    )
    assert out == new_seed and "runs already made as the config says" in line


def test_andrea_sweep_takes_the_rungs_path_from_variants_it_was_not_asked_to_run(tmp_path, monkeypatch, capsys):
    from andrea_lab.commands import sweep

    monkeypatch.setattr(speed_path, "this_cpu_has_bf16_units", lambda: True)
    suite = Path(__file__).resolve().parents[3] / "experiments/suites/stability_width.yaml"
    marker = tmp_path / "stability_width" / "d64" / "baseline" / "lr1e-3-seed500" / "sweep-run.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"overrides": {}}))  # made as the config says (fp32), before the rule's d64
    args = ["--lrs", "1e-3", "--seeds", "500", "--scales", "d64", "--runs-dir", str(tmp_path), "--dry-run"]
    assert sweep.main([str(suite), *args, "--variants", "qk_norm"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "speed: as the config says (as d64 baseline's runs were made, one path a rung) for d64 qk_norm"
    marker.unlink()  # nothing made at d64: the rule's own choice
    assert sweep.main([str(suite), *args, "--variants", "qk_norm"]) == 0
    assert capsys.readouterr().out.startswith("speed: bf16-mixed, fp32 attention (d_model 64 >= 64")


@pytest.mark.parametrize("table_precision", ["32-true", "bf16-mixed", ""])
def test_a_rung_a_committed_table_holds_keeps_the_tables_arithmetic(table_precision):
    # andrea sweep --from-table: the table's rows are runs made (their witness must rerun them to the bit), and a
    # rung the table holds none of (the ladder's next one) takes the rule's own path.
    specs = [_spec(1, "d64", "pre"), _spec(2, "d64", "gpt2_init"), _spec(3, "d128", "pre")]
    read = lambda spec: Rung(int(spec.scale[1:]), 250, 2048)  # noqa: E731 - the rule alone would take bf16 at both
    tabled = lambda spec: Tabled(table_precision) if spec.index == 1 else None  # noqa: E731 - the table holds d64 pre's
    out, line = apply(specs, "auto", read, True, recorded=lambda s: None, tabled=tabled)
    assert out[2].command[-6:] == BF16_EAGER_TAIL
    if table_precision == "32-true":
        assert [s.command for s in out[:2]] == [s.command for s in specs[:2]]
        assert line.startswith("speed: as the config says (as the committed table's runs were made (fp32)")
    elif not table_precision:  # a table from before runs recorded their precision: made as the config said
        assert [s.command for s in out[:2]] == [s.command for s in specs[:2]]
        assert line.startswith("speed: as the config says (as the committed table's runs were made (as the config")
    else:
        assert all(s.command[-6:] == BF16_EAGER_TAIL for s in out[:2])
        assert "bf16-mixed, fp32 attention (as the committed table's runs were made (bf16-mixed)) for d64 pre;" in line
    assert "(as d64 pre's runs were made, one path a rung) for d64 gpt2_init" in line


def test_a_tabled_rung_keeps_the_compile_its_table_recorded_whatever_the_rule_says_now():
    """A rung carried across sessions on a path the rule would not choose now (the rule's figures were measured
    again since): a table that records it (its ``compiled`` column) keeps the rung there, or the witness would rerun
    on the other path and never reproduce the table; an eager table's rung stays eager where the rule would compile."""
    specs = [_spec(index, "d256", "pre") for index in range(1, 41)]
    read = lambda spec: Rung(256, 100, 64 * 64)  # noqa: E731 - short fits; fits=1 as rung_of reads it
    assert not choose(True, dataclasses.replace(read(specs[0]), fits=40)).compile, "the premise: the rule is eager"
    out, line = apply(
        specs, "auto", read, True, recorded=lambda s: None, tabled=lambda spec: Tabled("bf16-mixed", True)
    )
    assert all(
        s.command[-6:] == ("--trainer.precision", "bf16-mixed", "--model.compile", "true", *BF16_EAGER_TAIL[-2:])
        for s in out
    )
    assert line.startswith(
        "speed: bf16-mixed, compiled, fp32 attention (as the committed table's runs were made (bf16-mixed, compiled))"
    )
    wide = lambda spec: Rung(512, 5000, 64 * 64)  # noqa: E731 - where the rule would compile
    out, line = apply(
        specs, "auto", wide, True, recorded=lambda s: None, tabled=lambda spec: Tabled("bf16-mixed", False)
    )
    assert all(s.command[-6:] == BF16_EAGER_TAIL for s in out) and "(bf16-mixed, eager))" in line
    # A table that does not say (before its compiled column): the rule's guess, which the witness then checks.
    out, line = apply(specs, "auto", read, True, recorded=lambda s: None, tabled=lambda spec: Tabled("bf16-mixed"))
    assert all(s.command[-6:] == BF16_EAGER_TAIL for s in out) and "runs were made (bf16-mixed)) for d256 pre" in line


def test_andrea_sweep_from_table_keeps_the_tables_path_for_its_witness(tmp_path, monkeypatch, capsys):
    from andrea_testing import finished_scaled_run

    from andrea_lab.commands import sweep
    from andrea_lab.experiments.compare.runs_table import write_runs_csv

    monkeypatch.setattr(speed_path, "this_cpu_has_bf16_units", lambda: True)
    suite = Path(__file__).resolve().parents[3] / "experiments/suites/stability_width.yaml"
    row = finished_scaled_run("stability_width", "baseline", 0, 1e-3, 500, 2.0, "d64", 0, precision="32-true")
    write_runs_csv(pd.DataFrame([row]), tmp_path / "runs.csv")
    args = ["--lrs", "1e-3", "--seeds", "500", "--scales", "d64", "--variants", "baseline,qk_norm"]
    table = ["--from-table", str(tmp_path / "runs.csv"), "--runs-dir", str(tmp_path / "runs"), "--dry-run"]
    assert sweep.main([str(suite), *args, *table]) == 0
    out = capsys.readouterr().out
    assert out.startswith("speed: as the config says (as the committed table's runs were made (fp32)")
    assert "d64 baseline lr=1e-3 seed=500" in out and "--trainer.precision bf16-mixed" not in out


def test_variants_that_set_their_precision_are_not_made_one():
    specs = [
        _spec(1, None, "fp32", {"trainer.precision": "32-true"}),
        _spec(2, None, "bf16", {"trainer.precision": "bf16-mixed"}),
    ]
    out, _ = apply(specs, "auto", _widths(fp32=64, bf16=64), bf16_units=True, recorded=lambda spec: None)
    assert out == specs


def test_runs_made_before_the_attention_key_keep_their_attention_and_a_suite_that_sets_it_is_left_alone():
    specs = [_spec(1, "d512", "pre"), _spec(2, "d512", "pre")]
    made = {"trainer.precision": "bf16-mixed", "model.compile": False}  # a marker written before the key existed
    out, line = apply(
        specs, "auto", _rung_of, bf16_units=True, recorded=lambda spec: made if spec is specs[0] else None
    )
    assert all("model.config.cpu_attention_fp32" not in s.overrides for s in out) and "as its runs were made" in line
    own = [_spec(3, "d512", "pre", {"model.config.cpu_attention_fp32": False})]
    kept, line = apply(own, "auto", _rung_of, bf16_units=True, recorded=lambda spec: None)
    assert kept == own and "set by the suite or --set" in line


def test_a_suite_or_set_that_names_the_precision_is_never_overridden():
    specs = [_spec(1, "d512", "pre", {"trainer.precision": "32-true"})]
    out, line = apply(specs, "bf16-compiled", _rung_of, bf16_units=True, recorded=lambda spec: None)
    assert out == specs and "set by the suite or --set" in line


def test_the_user_forces_either_way():
    specs = [_spec(1, "d32", "pre"), _spec(2, "d512", "pre")]
    forced, line = apply(specs, "bf16-compiled", _rung_of, bf16_units=False, recorded=lambda spec: None)
    assert all(
        s.command[-6:]
        == ("--trainer.precision", "bf16-mixed", "--model.compile", "true", "--model.config.cpu_attention_fp32", "true")
        for s in forced
    )
    assert "--speed bf16-compiled" in line
    plain, _ = apply(specs, "fp32", _rung_of, bf16_units=True, recorded=lambda spec: None)
    assert [s.command for s in plain] == [s.command for s in specs]  # the config already says fp32 eager
    assert apply(specs, "config", _rung_of, bf16_units=True) == (specs, None)


def test_auto_keeps_a_rung_whose_runs_an_earlier_sweep_made_as_the_config_said():
    specs = [_spec(1, "d512", "pre"), _spec(2, "d512", "pre")]
    out, line = apply(specs, "auto", _rung_of, bf16_units=True, recorded=lambda s: {} if s.index == 2 else None)
    assert out == specs and "runs already made as the config says" in line


def test_auto_resumes_a_rung_with_the_path_an_earlier_sweep_chose_for_it(tmp_path):
    first, _ = apply([_spec(1, "d512", "pre", root=tmp_path)], "auto", _rung_of, True, recorded=lambda s: None)
    marker = tmp_path / "d512" / "pre" / "1" / "sweep-run.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"overrides": first[0].overrides}))
    # On a CPU without bf16 units now, the runs already made in bf16 keep their command (else: refused as other).
    again, line = apply([_spec(1, "d512", "pre", root=tmp_path)], "auto", _rung_of, bf16_units=False)
    assert again[0].command == first[0].command and "as its runs were made" in line


def test_precision_spellings_are_one_precision():
    rung = Rung(512, 250, 2048, precision="bf16", compile=False, cpu_attention_fp32=True)
    out, _ = apply([_spec(1, "d512", "pre")], "bf16", lambda spec: rung, bf16_units=True, recorded=lambda s: None)
    assert out[0].command == _spec(1, "d512", "pre").command


def test_this_cpu_is_read_not_assumed(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu sse avx2 avx512f\n")
    from andrea_lab.runs import machine

    real = machine.cpu_description
    monkeypatch.setattr(machine, "cpu_description", lambda: real(cpuinfo))
    assert speed_path.this_cpu_has_bf16_units() is False
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu avx512f avx512_bf16\n")
    assert speed_path.this_cpu_has_bf16_units() is True


def test_a_rung_is_read_from_the_planned_command(tmp_path):
    from andrea_lab.experiments.sweep.plan import plan_sweep
    from andrea_lab.experiments.sweep.suite import load_suite

    suite = load_suite(Path(__file__).resolve().parents[3] / "experiments/suites/stability_width.yaml")
    spec = next(s for s in plan_sweep(suite, tmp_path) if s.scale == "d256")
    rung = speed_path.rung_of(spec)
    assert (rung.d_model, rung.steps, rung.tokens_per_step) == (256, 200, 16 * 64)
    assert (rung.precision, rung.compile) == ("32-true", False)


def test_a_rung_trained_off_the_cpu_keeps_its_config():
    gpu = Rung(512, 250, 2048, on_cpu=False)
    out, line = apply([_spec(1, "d512", "pre")], "auto", lambda spec: gpu, bf16_units=True, recorded=lambda s: None)
    assert out[0].command == _spec(1, "d512", "pre").command and "not a CPU fit" in line


def test_without_the_parser_auto_keeps_the_configs_and_a_forced_path_is_put_in_every_command(monkeypatch):
    specs = [_spec(1, "d64", "pre")]
    unchanged, line = speed_path.for_sweep(specs, "auto", parse=False)
    assert unchanged == specs and line == "speed: as the configs say (--no-check: no rule)"
    forced, _ = speed_path.for_sweep(specs, "bf16", parse=False)
    assert forced[0].command[-6:] == BF16_EAGER_TAIL


def test_a_command_that_does_not_parse_keeps_its_config(monkeypatch):
    def unreadable(spec):
        raise speed_path.SuiteError("andrea fit ...: no such option")

    monkeypatch.setattr(speed_path, "rung_of", unreadable)
    specs = [_spec(1, "d512", "pre")]
    out, line = speed_path.for_sweep(specs, "auto")
    assert out == specs and "its command was not read" in line
