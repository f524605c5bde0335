"""A suite whose scales are corpora (andrea_lab.experiments.compare.domains): each claim per corpus and across
them, on constructed run tables: 'holds on both', 'holds on python only', 'not judged on english'."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from andrea_lab.commands.compare import main as compare_main
from andrea_lab.experiments.compare import domains, scales
from andrea_lab.experiments.compare.runs_table import read_runs_csv, write_runs_csv
from andrea_lab.experiments.sweep.scales import Scale
from tests.andrea_testing import finished_scaled_run

LRS = (4e-3, 8e-3, 1.6e-2)
BASE_LOSS = (2.5, 2.2, 2.8)  # the reference's loss per LR: its optimum inside the grid
SEEDS = range(6)
#: Each variant's loss minus b's, per domain and seed (None: the variant did not run there).
EFFECTS = {
    "python": {"a": [-0.30, -0.31, -0.29, -0.30, -0.32, -0.28], "c": [-0.2, -0.21, -0.19, -0.2, -0.22, -0.18]},
    "english": {"a": [-0.10, -0.12, -0.09, -0.11, -0.10, -0.13], "c": [0.05, -0.06, 0.04, -0.05, 0.06, -0.04]},
}
CLAIMS = [
    {"lower_loss": ["a", "b"], "text": "a beats b"},
    {"lower_loss": ["c", "b"], "text": "c beats b"},
    {"lower_loss": ["d", "b"], "text": "d beats b"},
]
CORPORA = {"python": "stdlib", "english": "shakespeare"}


def domain_runs() -> pd.DataFrame:
    """A runs table as `andrea sweep` leaves it for a suite with scales python and english: b, a and c on both,
    d on python only (its English runs never made)."""
    rows = []
    for scale_index, domain in enumerate(CORPORA):
        effects = {"b": [0.0] * len(SEEDS), **EFFECTS[domain]}
        if domain == "python":
            effects["d"] = [-0.1 - seed / 100 for seed in SEEDS]
        for variant_index, (variant, per_seed) in enumerate(effects.items()):
            for seed in SEEDS:
                for lr, base in zip(LRS, BASE_LOSS):
                    loss = base + seed / 50 + per_seed[seed]
                    rows.append(
                        finished_scaled_run("domains", variant, variant_index, lr, seed, loss, domain, scale_index,
                                            steps=100)
                    )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture
def runs_csv(tmp_path: Path) -> Path:
    path = tmp_path / "domains" / "runs.csv"
    path.parent.mkdir()
    write_runs_csv(domain_runs(), path)
    return path


def test_scales_are_a_domain_axis_only_when_each_names_its_own_corpus():
    assert domains.domain_axis([Scale(name, {"data.corpus": corpus}) for name, corpus in CORPORA.items()]) == CORPORA
    assert domains.domain_axis([Scale("d64", {"model.config.d_model": 64}), Scale("d128", {})]) is None
    same = [Scale("a", {"data.corpus": "stdlib"}), Scale("b", {"data.corpus": "stdlib"})]
    assert domains.domain_axis(same) is None, "two scales on one corpus are not two domains"
    assert domains.domain_axis([Scale("python", {"data.corpus": "stdlib"})]) is None


@pytest.mark.parametrize(
    ("outcomes", "verdict"),
    [
        ({"python": "**reproduced**", "english": "reproduced (at a shared LR, off b's own optimum)"}, "holds on both"),
        ({"python": "**reproduced**", "english": "**not detected**"}, "holds on python only"),
        ({"python": "**not detected**", "english": "**not detected**"}, "holds on neither"),
        ({"python": "**reproduced**", "english": "**contradicted**"}, "holds on python only; contradicted on english"),
        ({"python": "**reproduced**", "english": "n/a"}, "holds on python; not judged on english"),
        (
            {"python": "**not detected**", "english": "not judged: b's optimum at the grid's lowest LR"},
            ("not detected on python; not judged on english"),
        ),
        (
            {"python": "**reproduced**", "english": "too few seeds (n=2) — lead only"},
            ("holds on python; not judged on english"),
        ),
        ({"python": "**reproduced**", "english": None}, "holds on python; not judged on english"),
        ({"a": "reproduced", "b": "reproduced", "c": "reproduced"}, "holds on all 3"),
    ],
)
def test_the_verdict_across_domains_says_where_it_holds_and_where_it_was_not_judged(outcomes, verdict):
    assert domains.across_domains(outcomes) == verdict


def test_each_claim_is_judged_per_corpus_and_across_them_with_each_corpus_interval_and_n(runs_csv):
    by_scale = scales.claims_by_scale(read_runs_csv(runs_csv), CLAIMS, "heldout_loss")
    table = domains.domain_table(by_scale, list(CORPORA)).set_index("claim")
    assert table.loc["lower_loss: a vs b", "across"] == "holds on both"
    assert table.loc["lower_loss: c vs b", "across"] == "holds on python only"
    assert table.loc["lower_loss: d vs b", "across"] == "holds on python; not judged on english"
    english = table.loc["lower_loss: a vs b", "english"]
    assert english.startswith("**reproduced**: a − b = −0.108 [") and "n=6" in english
    not_detected = table.loc["lower_loss: c vs b", "english"]
    assert not_detected.startswith("**not detected**: c − b = +0.000 [−0.058, +0.058], n=6")
    assert table.loc["lower_loss: d vs b", "english"].startswith("n/a: no finished or diverged run of d")


def write_suite(tmp_path: Path, name: str, scales: list[dict], claims: list) -> Path:
    """A suite over the constructed table's variants, LRs and seeds, with these scales and claims."""
    (tmp_path / "base.yaml").write_text("model: {}\n")
    suite = tmp_path / f"{name}.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "lrs": list(LRS),
                "seeds": list(SEEDS),
                "reference": "b",
                "claims": claims,
                "scales": scales,
                "variants": [{"name": variant} for variant in ("b", "a", "c", "d")],
            }
        )
    )
    return suite


def test_compare_prints_the_verdict_by_domain_table_and_writes_domains_csv(runs_csv, tmp_path, capsys):
    corpora = [{"name": name, "overrides": {"data.corpus": corpus}} for name, corpus in CORPORA.items()]
    suite = write_suite(tmp_path, "domains", corpora, CLAIMS)
    out = tmp_path / "out"
    assert compare_main([str(runs_csv), "--suite", str(suite), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "## Verdict × domain" in printed
    assert "| claim | hypothesis | on python (stdlib) | on english (shakespeare) | across domains |" in printed
    written = pd.read_csv(out / "domains.csv")
    assert list(written.columns) == ["claim", "text", "python", "english", "across"]
    assert list(written["across"]) == [
        "holds on both",
        "holds on python only",
        "holds on python; not judged on english",
    ]


def test_a_suite_whose_scales_are_widths_gets_no_domain_table(runs_csv, tmp_path, capsys):
    widths = [{"name": name, "overrides": {"model.config.d_model": 64 * (i + 1)}} for i, name in enumerate(CORPORA)]
    suite = write_suite(tmp_path, "widths", widths, CLAIMS[:1])
    assert compare_main([str(runs_csv), "--suite", str(suite), "--out", str(tmp_path / "out")]) == 0
    assert "Verdict × domain" not in capsys.readouterr().out
    assert not (tmp_path / "out" / "domains.csv").exists()


def test_the_project_gathers_every_suite_on_a_domain_axis_into_one_table():
    """docs/results.md's project-wide verdict × domain table: one row per claim of every committed suite whose
    scales are corpora, with the suite named; a suite on a width axis adds nothing, and none at all gives no table."""
    from andrea_lab.experiments.compare.project import CommittedSuite

    claims = tuple(CLAIMS[:2])  # as a suite file holds them
    on_corpora = CommittedSuite("english_x", domain_runs(), claims, scaled=True, domains=CORPORA)
    on_widths = CommittedSuite("widths", domain_runs(), claims, scaled=True, domains=None)
    block = domains.project_domain_block([on_corpora, on_widths])
    assert block.startswith("2 claims of 1 suites asked on more than one corpus")
    rows = [line for line in block.splitlines() if line.startswith("| english_x")]
    assert len(rows) == 2 and "holds on both" in rows[0] and "holds on python only" in rows[1]
    assert "| suite | claim | hypothesis | on python (stdlib) | on english (shakespeare) | across domains |" in block
    assert domains.project_domain_block([on_widths]) is None
