"""A suite's scale axis: what a valid one gives (runs one directory level down, the scale's overrides in each
command, the scale in the plan, the dry run and the sweep's marker), and one clear line for each invalid one."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys

import pytest
import yaml

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep.plan import first_run_per_variant, plan_sweep
from andrea_lab.experiments.sweep.runner import Runner
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite
from andrea_lab.runs.directory import START_MARKER


def scaled_document() -> dict:
    return {
        "name": "st",
        "base": "base.yaml",
        "common": {"trainer.max_steps": 10},
        "lrs": [1.0e-3, 1.0e-2],
        "seeds": [0, 1],
        "scales": [
            {"name": "d64", "overrides": {"model.config.d_model": 64, "model.config.n_head": 2}},
            {
                "name": "d128",
                "description": "the width of the spec's tiny preset",
                "overrides": {"model.config.d_model": 128, "model.config.n_head": 4},
            },
        ],
        "variants": [{"name": "baseline"}, {"name": "qk", "overrides": {"model.config.qk_norm": True}}],
    }


def write_suite(tmp_path, document):
    (tmp_path / "base.yaml").write_text("model: {}\n")
    path = tmp_path / "st.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def option(command, key):
    values = [command[i + 1] for i, arg in enumerate(command) if arg == f"--{key}"]
    assert values, f"--{key} not in {command}"
    return values[-1]


def test_a_scale_axis_loads_in_order_with_its_overrides(tmp_path):
    suite = load_suite(write_suite(tmp_path, scaled_document()))
    assert [s.name for s in suite.scales] == ["d64", "d128"]
    assert suite.scales[1].overrides == {"model.config.d_model": 128, "model.config.n_head": 4}
    assert suite.scales[1].description.startswith("the width")
    assert suite.scales[0].describe() == "d64 (d_model=64, n_head=2)"


def _mutate(change):
    document = scaled_document()
    change(document)
    return document


INVALID = [
    ("not a list", lambda d: d.update(scales={"model.config.d_model": [64, 128]}), ["scales must be a list"]),
    ("empty", lambda d: d.update(scales=[]), ["scales is empty"]),
    ("item not a mapping", lambda d: d["scales"].append("d256"), ["scale 3 must be a mapping", "'d256'"]),
    (
        "unknown key",
        lambda d: d["scales"][0].update(override={}),
        ["scale 1: unknown key 'override'", "did you mean 'overrides'"],
    ),
    ("no name", lambda d: d["scales"][0].pop("name"), ["scale 1 has no name"]),
    ("bad name", lambda d: d["scales"][0].update(name="d 64"), ["'d 64' is not a valid name"]),
    ("duplicate name", lambda d: d["scales"][1].update(name="d64"), ["duplicate scale name 'd64'"]),
    ("no overrides", lambda d: d["scales"][0].pop("overrides"), ["scale 'd64' has no overrides"]),
    (
        "a key of the sweep",
        lambda d: d["scales"][0]["overrides"].update({"model.lr": 0.1}),
        ["'model.lr' is set by the sweep"],
    ),
    (
        "different keys",
        lambda d: d["scales"][1]["overrides"].pop("model.config.n_head"),
        [
            "scale 'd128' sets model.config.d_model but scale 'd64' sets model.config.d_model, model.config.n_head",
            "every scale must set the same keys",
        ],
    ),
    (
        "heads do not divide",
        lambda d: d["scales"][1]["overrides"].update({"model.config.n_head": 3}),
        ["scale 'd128': model.config.d_model 128 is not divisible by model.config.n_head 3"],
    ),
    (
        "common sets a scale key",
        lambda d: d["common"].update({"model.config.d_model": 96}),
        ["common sets 'model.config.d_model', which the scales set"],
    ),
    (
        "a variant sets a scale key",
        lambda d: d["variants"][1]["overrides"].update({"model.config.n_head": 8}),
        ["variant 'qk' sets 'model.config.n_head', which the scales set"],
    ),
]


@pytest.mark.parametrize("change, expected", [item[1:] for item in INVALID], ids=[item[0] for item in INVALID])
def test_invalid_scales_are_refused_in_one_line_naming_the_value(tmp_path, change, expected):
    with pytest.raises(SuiteError) as caught:
        load_suite(write_suite(tmp_path, _mutate(change)))
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "st.yaml") in message
    for part in expected:
        assert part in message


def test_each_scale_runs_one_directory_down_with_its_overrides_before_the_variants(tmp_path):
    suite = load_suite(write_suite(tmp_path, scaled_document()))
    specs = plan_sweep(suite, tmp_path / "runs")
    assert len(specs) == 2 * 2 * 2 * 2 and len({s.run_dir for s in specs}) == 16
    # seeds outermost, then scales, then LRs, then variants
    assert [(s.seed, s.scale, s.lr, s.variant) for s in specs[:5]] == [
        (0, "d64", 1e-3, "baseline"),
        (0, "d64", 1e-3, "qk"),
        (0, "d64", 1e-2, "baseline"),
        (0, "d64", 1e-2, "qk"),
        (0, "d128", 1e-3, "baseline"),
    ]
    spec = next(s for s in specs if s.scale == "d128" and s.variant == "qk" and s.lr == 1e-2 and s.seed == 1)
    assert spec.run_dir == (tmp_path / "runs" / "st" / "d128" / "qk" / "lr1e-2-seed1").resolve()
    assert spec.label == "d128 qk lr=1e-2 seed=1" and spec.scale_index == 1
    command = list(spec.command)
    assert option(command, "model.config.d_model") == "128" and option(command, "model.config.n_head") == "4"
    assert command.index("--model.config.d_model") < command.index("--model.config.qk_norm")
    assert option(command, "trainer.logger.init_args.save_dir") == str((tmp_path / "runs" / "st" / "d128").resolve())
    assert option(command, "trainer.logger.init_args.name") == "qk"
    assert spec.overrides == {
        "trainer.max_steps": 10,
        "model.config.d_model": 128,
        "model.config.n_head": 4,
        "model.config.qk_norm": True,
    }


def test_the_first_run_of_each_scale_and_variant_stands_for_its_model_and_its_fit_args_follow_fit(tmp_path):
    suite = load_suite(write_suite(tmp_path, scaled_document()))
    specs = plan_sweep(suite, tmp_path / "runs")
    firsts = first_run_per_variant(specs)
    assert [(s.scale, s.variant, s.lr, s.seed) for s in firsts] == [
        ("d64", "baseline", 1e-3, 0),
        ("d64", "qk", 1e-3, 0),
        ("d128", "baseline", 1e-3, 0),
        ("d128", "qk", 1e-3, 0),
    ]
    spec = firsts[-1]
    assert spec.fit_args == spec.command[spec.command.index("fit") + 1 :] and "fit" not in spec.fit_args
    assert option(list(spec.fit_args), "model.config.d_model") == "128"


def test_scales_can_be_chosen_and_a_wrong_name_or_a_clashing_set_is_refused(tmp_path):
    suite = load_suite(write_suite(tmp_path, scaled_document()))
    assert {s.scale for s in plan_sweep(suite, tmp_path / "runs", scales=["d128"])} == {"d128"}
    with pytest.raises(SuiteError, match="no scale named 'd256'; scales: d64, d128"):
        plan_sweep(suite, tmp_path / "runs", scales=["d256"])
    clashing = dataclasses.replace(suite, common={**suite.common, "model.config.n_head": 1})  # as --set does
    with pytest.raises(SuiteError, match="common sets 'model.config.n_head', which the scales set"):
        plan_sweep(clashing, tmp_path / "runs")
    unscaled = load_suite(write_suite(tmp_path, {k: v for k, v in scaled_document().items() if k != "scales"}))
    with pytest.raises(SuiteError, match="--scales given but the suite has no scales"):
        plan_sweep(unscaled, tmp_path / "runs", scales=["d64"])
    assert {s.scale for s in plan_sweep(unscaled, tmp_path / "runs")} == {None}


def test_the_dry_run_shows_the_scale_of_every_run(tmp_path, capsys):
    path = write_suite(tmp_path, scaled_document())
    code = sweep_command.main(
        [str(path), "--runs-dir", str(tmp_path / "runs"), "--dry-run", "--no-check", "--scales", "d128", "--seeds", "0"]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "1 scales (d128) x 2 variants x 2 LRs" in printed
    assert "d128 qk lr=1e-2 seed=0: run" in printed and "d64" not in printed.replace(str(path), "")
    code = sweep_command.main([str(path), "--dry-run", "--no-check", "--scales", "d32"])
    assert code == 2 and "no scale named 'd32'" in capsys.readouterr().err


def test_the_sweep_records_each_runs_scale_in_its_marker(tmp_path):
    suite = load_suite(write_suite(tmp_path, scaled_document()))
    specs = [
        dataclasses.replace(spec, command=(sys.executable, "-c", "pass"))
        for spec in plan_sweep(suite, tmp_path / "runs", seeds=[0], lrs=[1e-3], variants=["qk"])
    ]
    Runner(specs, jobs=1, out=io.StringIO(), poll_s=0.02).run()
    markers = [json.loads((spec.run_dir / START_MARKER).read_text()) for spec in specs]
    assert [(m["scale"], m["scale_index"], m["variant"]) for m in markers] == [("d64", 0, "qk"), ("d128", 1, "qk")]


def test_a_variant_and_a_scale_are_checked_by_the_one_named_entry_helper():
    """Both lists go through suite_keys.named_entry: the same rules and the same messages for either."""
    from andrea_lab.experiments.sweep.suite_keys import SuiteError, named_entry

    seen: dict[str, int] = {}
    assert named_entry({"name": "a", "overrides": {"model.lr_x": 1}}, 1, "scale", ("name", "overrides"), "f", seen) == (
        "a",
        {"model.lr_x": 1},
    )
    assert seen == {"a": 1}
    for raw, message in (
        (["a"], "f: scale 2 must be a mapping with keys name, overrides"),
        ({"nmae": "b"}, "f: scale 2: unknown key 'nmae' (did you mean 'name'?)"),
        ({"overrides": {}}, "f: scale 2 has no name"),
        ({"name": "a"}, "f: duplicate scale name 'a' (scales 1 and 2)"),
        ({"name": "b", "overrides": {"model.lr": 1}}, "f: scale 'b' overrides: 'model.lr' is set"),
    ):
        with pytest.raises(SuiteError) as info:
            named_entry(raw, 2, "scale", ("name", "overrides"), "f", dict(seen))
        assert str(info.value).startswith(message)


def test_a_variant_sets_a_scale_key_rung_by_rung_through_per_scale(tmp_path):
    """The one way a variant differs in a key the scale axis owns (the ladder's init scale): per_scale, applied
    after the scale's overrides, at the scales it names only."""
    document = scaled_document()
    document["variants"].append({"name": "narrow_heads", "per_scale": {"d128": {"model.config.n_head": 2}}})
    suite = load_suite(write_suite(tmp_path, document))
    heads = {
        (spec.scale, spec.variant): option(spec.command, "model.config.n_head")
        for spec in plan_sweep(suite, tmp_path / "runs")
    }
    assert heads[("d128", "narrow_heads")] == "2" and heads[("d128", "baseline")] == "4"
    assert heads[("d64", "narrow_heads")] == heads[("d64", "baseline")] == "2"
    twin = dict(document, variants=[*document["variants"], {"name": "twin", "seed_offset": 100}])
    assert load_suite(write_suite(tmp_path, twin)).identical_variants() == ("baseline", "twin")  # not narrow_heads


@pytest.mark.parametrize(
    "per_scale, message",
    [
        ({"d32": {"model.config.n_head": 1}}, "variant 'x': per_scale names scale 'd32'; scales: d64, d128"),
        ([1], "variant 'x': per_scale must be a mapping of scale names to overrides, got [1]"),
        ({"d64": {"model.lr": 1}}, "per_scale 'd64': 'model.lr' is set by the sweep for every run"),
    ],
)
def test_a_bad_per_scale_is_one_line(tmp_path, per_scale, message):
    document = scaled_document()
    document["variants"].append({"name": "x", "per_scale": per_scale})
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(write_suite(tmp_path, document))
