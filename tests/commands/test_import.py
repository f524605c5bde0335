"""`andrea import --from-hf` end to end: a trained run exported and imported back is the same model, and the
imported checkpoint works with generate, trace, validate and a new fit's ``--model.init_from``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import main
from andrea_lab.runs.checkpoint_io import load_checkpoint

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def imported(trained_micro_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("import")
    assert (
        main(
            [
                "export",
                "--ckpt",
                str(trained_micro_run / "checkpoints" / "last.ckpt"),
                "--to",
                "hf",
                "--out",
                str(root / "hf"),
            ]
        )
        == 0
    )
    assert main(["import", "--from-hf", str(root / "hf"), "--out", str(root / "micro.ckpt")]) == 0
    return root / "micro.ckpt"


def fit_args(run: Path, root: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(REPO / "experiments/quickstart.yaml"),
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(run.parents[2] / "pangram.txt"),
        "--data.cache_dir",
        str(run.parents[2] / "cache"),
        "--trainer.logger.init_args.save_dir",
        str(root / "runs"),
        *extra,
    ]


@pytest.mark.slow
def test_andrea_to_hf_to_andrea_is_exact(trained_micro_run, imported, tmp_path, capsys):
    original = load_checkpoint(trained_micro_run / "checkpoints" / "last.ckpt")
    back = load_checkpoint(imported)
    assert back["state_dict"].keys() == original["state_dict"].keys()
    assert all(torch.equal(back["state_dict"][k], original["state_dict"][k]) for k in original["state_dict"])
    assert back["AndreaDataModule"]["tokenizer_json"] == original["AndreaDataModule"]["tokenizer_json"]
    assert back["hyper_parameters"]["config"] == {
        **original["hyper_parameters"]["config"],
        "norm_placement": "andrea-lab:pre",
        "activation": "andrea-lab:gelu",
    }
    again = tmp_path / "again.ckpt"
    assert main(["import", "--from-hf", str(imported.parent / "hf"), "--out", str(again)]) == 0
    out = capsys.readouterr().out  # says how to start a fit from it
    assert f"--model.init_from {again}" in out and f"--data.tokenizer {again.with_suffix('.tokenizer.json')}" in out
    assert "--model.config.d_model 64" in out


@pytest.mark.slow
def test_generate_and_trace_accept_the_imported_checkpoint(trained_micro_run, imported, capsys):
    texts = []
    for ckpt in (trained_micro_run / "checkpoints" / "last.ckpt", imported):
        assert (
            main(
                [
                    "generate",
                    "--ckpt",
                    str(ckpt),
                    "--prompt",
                    "the lazy",
                    "--temperature",
                    "0",
                    "--max_new_tokens",
                    "30",
                ]
            )
            == 0
        )
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].startswith("the lazy")
    assert main(["trace", "--ckpt", str(imported), "--text", "the quick brown", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token"] == "n"


@pytest.mark.slow
def test_validate_and_a_fit_from_init_from_start_at_the_imported_models_loss(trained_micro_run, imported, tmp_path):
    trained_loss = json.loads((trained_micro_run / "summary.json").read_text())["final_val_loss"]
    assert main(["validate", *fit_args(trained_micro_run, tmp_path), "--ckpt_path", str(imported)]) == 0
    validated = json.loads(imported.with_name(f"{imported.stem}.validate.json").read_text())  # outside a run
    assert not (tmp_path / "runs").exists(), "validate starts no run"
    assert validated["val_loss"] == pytest.approx(trained_loss, abs=1e-5)
    assert (
        main(
            [
                "fit",
                *fit_args(trained_micro_run, tmp_path / "fit"),
                "--model.init_from",
                str(imported),
                "--trainer.max_steps",
                "2",
            ]
        )
        == 0
    )
    summary = json.loads(next((tmp_path / "fit" / "runs").rglob("summary.json")).read_text())
    # The loss before the first update is the imported model's, not a fresh one's (ln 257 = 5.55).
    assert summary["initial_val_loss"] == pytest.approx(trained_loss, abs=1e-5) and trained_loss < 4


@pytest.mark.slow
def test_init_from_of_another_architecture_is_one_message(trained_micro_run, imported, tmp_path, capsys):
    assert (
        main(
            [
                "fit",
                *fit_args(trained_micro_run, tmp_path),
                "--model.init_from",
                str(imported),
                "--model.config.d_model",
                "32",
                "--trainer.max_steps",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "model.init_from" in err and "d_model: checkpoint 64, config 32" in err and "Traceback" not in err
