"""Suite files: what a valid one gives, and a clear error naming the offending value for each invalid one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from andrea_lab.experiments.sweep.suite import (
    SuiteError,
    cli_value,
    format_lr,
    load_suite,
    override_args,
    parse_cli_list,
    parse_run_version,
    run_version,
)

REPO = Path(__file__).resolve().parents[3]


def valid_document() -> dict:
    return {
        "name": "np",
        "base": "base.yaml",
        "common": {"trainer.max_steps": 10, "stability.stuck_after": 10},
        "lrs": ["1e-3", 3.0e-3],
        "seeds": [0, 1],
        "variants": [
            {"name": "pre", "overrides": {"model.config.norm_placement": "pre"}},
            {
                "name": "post",
                "description": "2017",
                "overrides": {"model.config.norm_placement": "post", "model.warmup_steps": 0},
            },
        ],
    }


def write_suite(tmp_path: Path, document: dict, name: str = "suite.yaml") -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_valid_suite_loads_with_the_base_resolved_next_to_the_suite(tmp_path):
    suite = load_suite(write_suite(tmp_path, valid_document()))
    assert suite.name == "np"
    assert suite.base == (tmp_path / "base.yaml").resolve()
    assert suite.lrs == (1e-3, 3e-3), "'1e-3' is a string to PyYAML and must still be a learning rate"
    assert suite.seeds == (0, 1)
    assert [v.name for v in suite.variants] == ["pre", "post"]
    assert suite.variant("post").overrides == {"model.config.norm_placement": "post", "model.warmup_steps": 0}
    assert suite.common == {"trainer.max_steps": 10, "stability.stuck_after": 10}


def test_the_name_defaults_to_the_file_name(tmp_path):
    document = valid_document()
    del document["name"]
    assert load_suite(write_suite(tmp_path, document, "residual.yaml")).name == "residual"


def _mutate(change):
    document = valid_document()
    change(document)
    return document


INVALID = [
    ("unknown top-level key", lambda d: d.update(variant=[]), ["unknown key 'variant'", "did you mean 'variants'"]),
    (
        "missing base config",
        lambda d: d.update(base="nowhere/base.yaml"),
        ["base config 'nowhere/base.yaml' does not exist"],
    ),
    ("missing key", lambda d: d.pop("seeds"), ["missing required key 'seeds'"]),
    ("empty lr grid", lambda d: d.update(lrs=[]), ["lrs is an empty grid"]),
    ("empty seed grid", lambda d: d.update(seeds=[]), ["seeds is an empty grid"]),
    ("no variants", lambda d: d.update(variants=[]), ["variants is empty"]),
    (
        "duplicate variant",
        lambda d: d["variants"].append({"name": "pre"}),
        ["duplicate variant name 'pre'", "variants 1 and 3"],
    ),
    ("duplicate lr", lambda d: d.update(lrs=[1e-3, "1.0e-3"]), ["lrs lists '1.0e-3' twice"]),
    ("duplicate seed", lambda d: d.update(seeds=[0, 0]), ["seeds lists 0 twice"]),
    ("lr not a number", lambda d: d.update(lrs=["fast"]), ["'fast' is not a number"]),
    ("lr not positive", lambda d: d.update(lrs=[0.0]), ["learning rate 0.0 must be a finite number > 0"]),
    ("negative seed", lambda d: d.update(seeds=[-1]), ["seed -1 must be an integer >= 0"]),
    ("lrs not a list", lambda d: d.update(lrs=1e-3), ["lrs must be a list"]),
    (
        "unknown variant key",
        lambda d: d["variants"][0].update(override={}),
        ["variant 1: unknown key 'override'", "did you mean 'overrides'"],
    ),
    ("variant without name", lambda d: d["variants"][0].pop("name"), ["variant 1 has no name"]),
    ("bad variant name", lambda d: d["variants"][0].update(name="pre norm"), ["'pre norm' is not a valid name"]),
    ("reserved variant name", lambda d: d["variants"][0].update(name="compare"), ["'compare' is reserved"]),
    (
        "reserved override",
        lambda d: d["variants"][1]["overrides"].update({"model.lr": 0.1}),
        ["'model.lr' is set by the sweep", "lrs:"],
    ),
    (
        "reserved logger override",
        lambda d: d["common"].update({"trainer.logger.init_args.name": "x"}),
        ["common: 'trainer.logger.init_args.name' is set by the sweep"],
    ),
    ("data seed override", lambda d: d["common"].update({"data.seed": 3}), ["'data.seed' is set by the sweep"]),
    (
        "not a dotted key",
        lambda d: d["variants"][0]["overrides"].update({"--model.lr": 1}),
        ["'--model.lr' is not a dotted config key"],
    ),
    (
        "overrides not a mapping",
        lambda d: d["variants"][0].update(overrides=["a"]),
        ["must be a mapping of dotted keys"],
    ),
    (
        "unknown resource",
        lambda d: d.update(resources={"gpu": 1}),
        ["resources: unknown key 'gpu'", "did you mean 'gpus'"],
    ),
    (
        "negative resource",
        lambda d: d.update(resources={"cpus": -2}),
        ["resources: cpus must be a non-negative number"],
    ),
    (
        "resources not a mapping",
        lambda d: d.update(resources=4),
        ["resources must be a mapping like {cpus: 4, gpus: 1}"],
    ),
]


@pytest.mark.parametrize("change, expected", [(c, e) for _, c, e in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_suites_are_refused_naming_the_offending_value(tmp_path, change, expected):
    path = write_suite(tmp_path, _mutate(change))
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message


def test_missing_or_unparsable_suite_files(tmp_path):
    with pytest.raises(SuiteError, match="suite file .*nope.yaml' does not exist"):
        load_suite(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("variants: [\n")
    with pytest.raises(SuiteError, match="is not valid YAML"):
        load_suite(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(SuiteError, match="a suite must be a mapping"):
        load_suite(tmp_path / "list.yaml")


@pytest.mark.parametrize(
    "lr, label",
    [
        (1e-3, "1e-3"),
        (3e-3, "3e-3"),
        (0.0015, "1.5e-3"),
        (6e-4, "6e-4"),
        (1.0, "1e0"),
        (0.1, "1e-1"),
        (2.5e-5, "2.5e-5"),
    ],
)
def test_format_lr_is_short_and_round_trips(lr, label):
    assert format_lr(lr) == label
    assert float(label) == pytest.approx(lr)
    assert parse_run_version(run_version(lr, 7)) == (pytest.approx(lr), 7)


def test_run_version_names_and_parsing():
    assert run_version(3e-3, 0) == "lr3e-3-seed0"
    assert parse_run_version("version_0") is None
    assert parse_run_version("lr3e-3-seed0.interrupted-20240101-000000") is None


def test_override_values_are_written_as_the_cli_reads_them():
    assert [cli_value(v) for v in (None, True, False, 3, 0.5, "post", [1, 2])] == [
        "null",
        "true",
        "false",
        "3",
        "0.5",
        "post",
        "[1, 2]",
    ]
    assert override_args({"model.config.norm_placement": "post", "model.warmup_steps": 0}) == [
        "--model.config.norm_placement",
        "post",
        "--model.warmup_steps",
        "0",
    ]


def test_command_line_grids():
    assert parse_cli_list("1e-3, 3e-3", "lrs") == (1e-3, 3e-3)
    assert parse_cli_list("0,1,2", "seeds") == (0, 1, 2)
    with pytest.raises(SuiteError, match="--lrs: 'x' is not a number"):
        parse_cli_list("1e-3,x", "lrs")
    with pytest.raises(SuiteError, match="--seeds: seeds is an empty grid"):
        parse_cli_list(" , ", "seeds")


SUITES = sorted((REPO / "experiments" / "suites").rglob("*.yaml"))
#: CPU suites without a GPU counterpart, and why.
CPU_ONLY = {
    "aa.yaml": "an A/A check of the statistics, not a question about ANDREA",
    "aa_confirm.yaml": "the A/A check at the tuned CPU proxy, with resampled rates by seeds per arm",
    "activation_confirm.yaml": "the confirmation of the CPU activation suite at the tuned proxy (20 fresh seeds)",
    "activation_wide.yaml": "the width check of activation.yaml; the GPU activation suite is at width 768",
    "activation_init.yaml": "a mechanism check of a CPU-scale result (GELU near-linear at init_std 0.02)",
    "norm_placement_confirm.yaml": "the confirmation runs of the CPU norm_placement suite's claims",
    "precision.yaml": "bf16-mixed on the CPU's matrix units against fp32: a question about the CPU path",
    "init_scale.yaml": "tuning the CPU proxy's initialisation (d_model 64); the 120M model's init is the spec's",
    "stability_width.yaml": "the width trend of stability_interventions (GPU: gpu/stability_interventions.yaml)",
    "depth_confirm.yaml": "the confirmation of the CPU depth suite's leads at the tuned proxy",
    "mlp_ratio_confirm.yaml": "the CPU mlp_ratio suite's equivalence and matched-parameter claims on fresh seeds",
    "norm_placement_tune.yaml": "the LR search of norm_placement at the tuned CPU proxy, before its confirmation",
    "optimizers_tuned.yaml": "the optimizers tuned by coordinate descent at the ladder's CPU rungs (issue 55)",
    "aa_cliff.yaml": "the A/A check at post-norm's cliff on the tuned CPU proxy",
    "norm_placement_tuned_confirm.yaml": "the confirmation of norm_placement_tune's leads at the tuned CPU proxy",
    "mlp_matched_confirm.yaml": "the CPU mlp_ratio suite's matched-parameter claim at per-variant LRs, fresh seeds",
    "precision_confirm.yaml": "bf16-mixed against fp32 at the tuned CPU proxy, fresh seeds: about the CPU path",
    "placements_mechanism.yaml": "a mechanism check of a CPU-scale result (peri, reordered behind pre at 6 blocks)",
    "placements_reordered_qk.yaml": "the follow-up of that check: the reordered placement with QK-norm, CPU scale",
    "ladder.yaml": "the CPU ladder (d64 to d256) of issue 54; a GPU top rung is optional, nothing waits for it",
    "speed_equivalence.yaml": "bf16-mixed (eager, compiled) against fp32 at the CPU ladder's d256 rung: the CPU path",
    "speed_equivalence_d64.yaml": "bf16-mixed with fp32 attention against fp32 at cpu-base (d64): the CPU path",
    "english_activation.yaml": "the CPU activation verdict rerun on the English corpus (issue 57), CPU proxy",
    "english_norm_placement.yaml": "the CPU norm placement verdict rerun on the English corpus (issue 57), CPU proxy",
    "english_precision.yaml": "the CPU precision verdict rerun on the English corpus (issue 57), CPU proxy",
    "english_qk_norm.yaml": "the CPU qk norm verdict rerun on the English corpus (issue 57), CPU proxy",
}


@pytest.mark.parametrize("path", SUITES, ids=[str(p.relative_to(REPO / "experiments" / "suites")) for p in SUITES])
def test_the_shipped_suites_are_valid(path):
    suite = load_suite(path)
    assert len(suite.seeds) >= 2, "the no-difference rule needs a seed spread"
    judges_sensitivity = any("lower_sensitivity" in claim for claim in suite.claims)
    # A suite's search (sweep.search_suite) tunes the LR over each variant's own values instead of lrs:.
    tried = min((len(search.keys.get("model.lr", ())) for search in suite.searches.values()), default=len(suite.lrs))
    assert tried >= (3 if judges_sensitivity else 2), "LR sensitivity needs a grid"
    is_gpu = path.parent.name == "gpu"
    assert suite.base.name == ("andrea-120m.yaml" if is_gpu else "cpu-base.yaml")
    counterpart = (path.parent / "gpu" / path.name) if not is_gpu else path.parent.parent / path.name
    assert counterpart.is_file() or path.name in CPU_ONLY, (
        f"{path.name} has no {'CPU' if is_gpu else 'GPU'} counterpart"
    )


def test_every_issue_suite_is_shipped():
    names = {p.stem for p in (REPO / "experiments" / "suites").glob("*.yaml")}
    assert {"norm_placement", "activation", "mlp_ratio", "depth", "residual"} <= names


# ====================================================================== the stuck-at-unigram window


def _with_warmups(tmp_path, base_warmup, common=None, **variant_warmups):
    """A suite of two variants, pre (the base's warmup unless given) and post, with ``common`` overrides."""
    (tmp_path / "base.yaml").write_text(
        "model: {}\n" if base_warmup is None else f"model: {{warmup_steps: {base_warmup}}}\n"
    )
    document = {
        "base": "base.yaml",
        "lrs": [1e-3],
        "seeds": [0, 1],
        "common": common or {},
        "variants": [
            {"name": name, "overrides": {} if warmup is None else {"model.warmup_steps": warmup}}
            for name, warmup in {"pre": None, **variant_warmups}.items()
        ],
    }
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_variants_whose_stuck_windows_differ_are_refused_in_one_line_naming_them(tmp_path):
    path = _with_warmups(tmp_path, 40, post=0, long=100)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "stuck-at-unigram window would start at different steps (pre 40, post 0, long 100;" in message
    assert "set stability.stuck_after under common:" in message


def test_the_module_default_warmup_counts_when_neither_base_nor_variant_sets_it(tmp_path):
    from andrea_lab.experiments.sweep.suite import _module_default_warmup

    default = _module_default_warmup()
    with pytest.raises(SuiteError, match=rf"\(pre {default}, post 0;"):
        load_suite(_with_warmups(tmp_path, None, post=0))
    assert load_suite(_with_warmups(tmp_path, None, post=default)).name == "w"  # equal after all


@pytest.mark.parametrize(
    "common, variant_windows",
    [
        ({"stability.stuck_after": 100}, None),  # the fix the suites use
        ({}, None),  # the same warmup everywhere: equal windows
    ],
)
def test_equal_stuck_windows_load(tmp_path, common, variant_windows):
    from andrea_lab.experiments.sweep.suite import stuck_windows

    warmups = {"post": 0} if common else {"post": 40}
    suite = load_suite(_with_warmups(tmp_path, 40, common, **warmups))
    assert set(stuck_windows(suite).values()) == ({100} if common else {40})


def test_a_variant_that_sets_its_own_stuck_after_is_refused_too(tmp_path):
    path = _with_warmups(tmp_path, 40, {"stability.stuck_after": 100})
    document = yaml.safe_load(path.read_text())
    document["variants"][0]["overrides"]["stability.stuck_after"] = 50
    document["variants"].append({"name": "post", "overrides": {"model.warmup_steps": 0}})
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(SuiteError, match=r"\(pre 50, post 100;"):
        load_suite(path)


# ====================================================================== claim keys


@pytest.mark.parametrize(
    "claim, fragment",
    [
        ({"lower_loss": ["pre", "post"], "lr": 2e-3}, "lr 2e-3 is not in pre's lrs (1e-3, 3e-3)"),
        ({"lower_loss": ["pre", "post"], "lr": "fast"}, "lr 'fast' is not a learning rate"),
        ({"lower_loss": ["pre", "post"], "lr": {"pre": 1e-3}}, "names exactly the claim's two variants"),
        ({"lower_sensitivity": ["pre", "post"], "lr": 1e-3}, "takes no lr"),
        ({"lower_loss": ["pre", "post"], "exploratory": "yes"}, "exploratory must be true or false"),
        ({"lower_loss": ["pre", "nope"]}, "'nope' is not a variant"),
    ],
)
def test_bad_claim_keys_are_refused(tmp_path, claim, fragment):
    with pytest.raises(SuiteError, match="claims: ") as info:
        load_suite(write_suite(tmp_path, _mutate(lambda d: d.update(claims=[claim]))))
    assert fragment in str(info.value)


def test_claims_at_lrs_fixed_in_advance_and_exploratory_ones_load(tmp_path):
    from andrea_lab.experiments.compare.claims import parse_claims

    claims = [
        {"lower_loss": ["pre", "post"], "lr": ["1e-3", 3e-3]},
        {"lower_loss_trained": ["pre", "post"], "lr": {"pre": 3e-3, "post": 1e-3}, "exploratory": True},
    ]
    suite = load_suite(write_suite(tmp_path, _mutate(lambda d: d.update(claims=claims))))
    parsed = parse_claims(list(suite.claims))
    assert [(c.kind, c.lrs, c.exploratory) for c in parsed] == [
        ("lower_loss", (1e-3, 1e-3), False),
        ("lower_loss", (3e-3, 3e-3), False),
        ("lower_loss_trained", (3e-3, 1e-3), True),
    ]
    assert [c.label for c in parsed] == [
        "lower_loss: pre vs post @ 1e-3",
        "lower_loss: pre vs post @ 3e-3",
        "lower_loss_trained: pre vs post @ pre 3e-3, post 1e-3 (exploratory)",
    ]


def test_identical_variants_are_the_a_a_pair():
    assert load_suite(REPO / "experiments" / "suites" / "aa.yaml").identical_variants() == ("a", "b")
    assert load_suite(REPO / "experiments" / "suites" / "norm_placement.yaml").identical_variants() is None


@pytest.mark.parametrize("path", SUITES, ids=[str(p.relative_to(REPO / "experiments" / "suites")) for p in SUITES])
def test_every_cpu_suite_says_what_it_cost_here(path):
    """A reader planning a rerun needs the price: measured (`andrea compare` notes "cost here" from the runs'
    wall times), or "not run yet" with an estimate. GPU suites have not run on this machine."""
    if "gpu" in path.parts:
        return
    lines = [line for line in path.read_text().splitlines() if line.startswith("# Cost here: ")]
    assert len(lines) == 1, (
        f"{path.name}: one '# Cost here: ...' comment line (measured, or 'not run yet' and an estimate)"
    )
    assert re.search(r"\d+ (min|h|s)\b", lines[0]), lines[0]
